"""Recording in Django's admin log what operators did to tasks and task types.

A task's own history says who changed its state (``LogRecord.actor``, written by the
queue verbs given ``by``). The admin log (``LogEntry``, the admin's "Recent actions")
keeps the same under the operator's account, and keeps what a task's history cannot:
deletions and changes to task types. Both the admin and atp's pages write it.
"""

from django.apps import apps
from django.contrib.contenttypes.models import ContentType

BATCH_SIZE = 500


def record(user, model, objects, message, *, deleted=False):
    """Log that ``user`` did ``message`` to ``objects``: ``(pk, text)`` pairs of ``model``.

    Does nothing without ``django.contrib.admin`` or a saved user.
    """
    if not apps.is_installed("django.contrib.admin") or getattr(user, "pk", None) is None:
        return
    from django.contrib.admin.models import CHANGE, DELETION, LogEntry

    content_type = ContentType.objects.get_for_model(model, for_concrete_model=False)
    entries = [
        LogEntry(user_id=user.pk, content_type_id=content_type.pk, object_id=str(pk),
                 object_repr=str(text)[:200], action_flag=DELETION if deleted else CHANGE,
                 change_message=message)
        for pk, text in objects
    ]
    LogEntry.objects.bulk_create(entries, batch_size=BATCH_SIZE)


def task_names(pks):
    """Return ``(pk, text)`` of the tasks ``pks`` as the admin log names them."""
    from atp.models import Instance

    return [(pk, f"#{pk} {identifier}") for pk, identifier in
            Instance.objects.filter(pk__in=list(pks)).values_list("pk", "identifier")]
