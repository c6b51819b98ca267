"""The task states and the transitions allowed between them.

This table is the contract; the queue verbs in ``atp.engine`` each move a task along
one of its edges with a guarded compare-and-set, and ``tests/test_states.py`` checks
that no verb steps outside it.
"""

from django.db import models
from django.utils.translation import gettext_lazy as _

from atp.exceptions import InvalidTransition


class Status(models.TextChoices):
    ACCEPTED = "ACCEPTED", _("accepted")
    SCHEDULED = "SCHEDULED", _("scheduled")
    RUNNING = "RUNNING", _("running")
    PAUSED = "PAUSED", _("paused")
    FINISHED = "FINISHED", _("finished")
    FAILED = "FAILED", _("failed")
    CANCELLED = "CANCELLED", _("cancelled")


# The groups are tuples in one fixed order: partial indexes and the queries meant to
# use them must spell the same ``status IN (...)`` list.

#: Claimed by a daemon and not yet ended: the task holds a lease.
IN_FLIGHT = (Status.SCHEDULED, Status.RUNNING, Status.PAUSED)
#: Not ended: waiting in the queue or in flight. A live task has a ``Task`` row.
LIVE = (Status.ACCEPTED, *IN_FLIGHT)
#: Ended. The daemon never moves a task out of these; an operator may re-enqueue
#: a failed or cancelled one.
TERMINAL = (Status.FINISHED, Status.FAILED, Status.CANCELLED)

TRANSITIONS = {
    Status.ACCEPTED: frozenset({Status.SCHEDULED, Status.CANCELLED}),
    Status.SCHEDULED: frozenset(
        {Status.RUNNING, Status.ACCEPTED, Status.FAILED, Status.CANCELLED}
    ),
    Status.RUNNING: frozenset(
        {Status.PAUSED, Status.FINISHED, Status.FAILED, Status.ACCEPTED, Status.CANCELLED}
    ),
    # A handler can return in the instant between the pause and the suspension of its
    # worker, so a paused task may still finish or fail on its own attempt.
    Status.PAUSED: frozenset(
        {Status.RUNNING, Status.FINISHED, Status.FAILED, Status.ACCEPTED, Status.CANCELLED}
    ),
    Status.FINISHED: frozenset(),
    Status.FAILED: frozenset({Status.ACCEPTED}),
    Status.CANCELLED: frozenset({Status.ACCEPTED}),
}


def is_allowed(current, target):
    """Return whether a task may move from ``current`` to ``target``."""
    return target in TRANSITIONS.get(current, ())


def sources_of(target):
    """Return the states from which a task may move to ``target``."""
    return frozenset(state for state, targets in TRANSITIONS.items() if target in targets)


def check_transition(current, target, *, task=None):
    """Raise ``InvalidTransition`` unless a task may move from ``current`` to ``target``."""
    if is_allowed(current, target):
        return
    raise InvalidTransition(
        describe_refusal(current, target, task=task), current=current, target=target
    )


def describe_refusal(current, target, *, task=None):
    """Return the message explaining why ``current`` cannot become ``target``."""
    who = f"task {task}" if task is not None else "a task"
    if current == target:
        return f"{who} is already {current}"
    if current in TERMINAL and not TRANSITIONS[current]:
        return f"cannot move {who} to {target}: it is already {current}"
    if target == Status.SCHEDULED:
        return f"cannot move {who} to SCHEDULED: only dequeue schedules a queued task"
    return f"cannot move {who} from {current} to {target}"
