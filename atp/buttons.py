"""Which of a task's buttons its state allows: atp's task page and the admin's both grey
a button by this table, so the two never disagree.

A greyed button is a hint, not the guard: the verb a button calls checks its own
transition (``atp.states``) when pressed, and refuses, saying why, when the task has moved
on since the page was drawn.
"""

from django.utils import timezone

from atp.models import Task
from atp.states import IN_FLIGHT, LIVE, TERMINAL, Status

#: The states each operator verb of a task's page applies to. ``run_now`` applies to a
#: waiting task only while it is delayed (``delay``).
APPLIES_TO = {
    "reenqueue": (*IN_FLIGHT, Status.FAILED, Status.CANCELLED),
    "pause": (Status.RUNNING,),
    "resume": (Status.PAUSED,),
    "run_now": (Status.ACCEPTED,),
    "run_again": TERMINAL,
    "cancel": LIVE,
    # A waiting task may be deleted too (atp's page); the admin's action deletes ended
    # ones only.
    "delete": (Status.ACCEPTED, *TERMINAL),
    "delete_ended": TERMINAL,
}


def delay(instance):
    """Return the time a waiting task is delayed to, or None when it is runnable (or not
    waiting)."""
    if instance.status != Status.ACCEPTED:
        return None
    due = Task.objects.filter(pk=instance.pk, daemon__isnull=True).values_list(
        "not_before", flat=True).first()
    return due if due is not None and due > timezone.now() else None


def applies(verb, status, *, delayed):
    """Return whether ``verb`` (a key of ``APPLIES_TO``) applies to a task in ``status``;
    ``delayed``: whether the task waits for a later time (``delay``)."""
    return status in APPLIES_TO[verb] and (verb != "run_now" or delayed)
