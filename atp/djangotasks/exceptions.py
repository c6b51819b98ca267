"""atp's refusals of an enqueue, as the Tasks framework's exceptions.

Each is both: code written for the framework catches what Django's own backends raise
(``TypeError`` for arguments that are not JSON, ``InvalidTask``...), and code written
for atp (or for ``ATPBackend`` before) catches atp's exception, or ``InvalidTask``.
"""

from contextlib import contextmanager

from atp import exceptions
from atp.djangotasks.compat import InvalidTask, InvalidTaskBackend, TaskException


class InvalidArguments(InvalidTask, exceptions.InputsNotSerializable, ValueError):
    """The task's arguments cannot be stored as JSON; nothing was enqueued.

    A ``TypeError`` (the framework's for a type JSON has not) and a ``ValueError`` (its
    for a value it cannot store, such as bytes that are not UTF-8)."""


class ArgumentsTooLarge(InvalidTask, exceptions.InputsTooLarge):
    """The task's arguments are larger than its queue allows; nothing was enqueued."""


class QueueFull(TaskException, exceptions.QueueFull):
    """The task's queue holds its ``max_queued`` tasks, or the queue all of
    ``ATP_MAX_QUEUED_TOTAL``: nothing was enqueued."""


class BackendMisconfigured(InvalidTaskBackend, exceptions.TaskTypeNotFound):
    """The queue's task type is not declared: its backend's settings cannot work."""


#: atp's refusal -> what the backend raises instead (the first that matches).
REFUSALS = (
    (exceptions.InputsNotSerializable, InvalidArguments),
    (exceptions.InputsTooLarge, ArgumentsTooLarge),
    (exceptions.QueueFull, QueueFull),
    (exceptions.TaskTypeNotFound, BackendMisconfigured),
)


@contextmanager
def refusals(alias):
    """Raise atp's refusals of an enqueue inside the block as the framework's exceptions
    (for a queue of backend ``alias``)."""
    try:
        yield
    except tuple(ours for ours, _ in REFUSALS) as exc:
        kind = next(theirs for ours, theirs in REFUSALS if isinstance(exc, ours))
        message = str(exc)
        if kind is BackendMisconfigured:
            message = (f"{message}: the settings of TASKS[{alias!r}] cannot work; "
                       "manage.py check says why (atp.E020)")
        raise kind(message) from exc
