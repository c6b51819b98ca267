"""What the queue verbs share: the database they write to and how they take arguments."""

from django.db import models, router

from atp.db import writes
from atp.exceptions import InvalidParameter
from atp.models import Instance


def database():
    """Return the alias of the database that holds the queue."""
    return router.db_for_write(Instance)


#: Decorator running a queue verb in its own retried transaction, or in a savepoint of
#: the caller's transaction (see ``atp.db.run_in_transaction``).
queue_write = writes(database)


def pk_of(instance):
    """Return the primary key of an ``Instance`` given as a model or a key; raise ``InvalidParameter``."""
    if isinstance(instance, models.Model):
        return instance.pk
    if isinstance(instance, bool):
        raise InvalidParameter(f"{instance!r} is not a task")
    try:
        return int(instance)
    except (TypeError, ValueError):
        raise InvalidParameter(f"{instance!r} is not a task or a task id") from None


def daemon_label(daemon):
    """Return how the history names ``daemon`` (a ``Daemon``, a label or None)."""
    return "" if daemon is None else str(daemon)


def actor_label(by):
    """Return how the history names the person ``by`` (a user, a name, or None)."""
    if by is None:
        return ""
    name = by.get_username() if hasattr(by, "get_username") else str(by)
    return name[:150]


def load_on_access(obj, *field_names):
    """Forget fields that were written as database expressions such as ``Now()``.

    Django keeps the expression object on the model after saving it; dropping it
    makes the first read of the field load the stored value instead.
    """
    for name in field_names:
        obj.__dict__.pop(name, None)
    return obj
