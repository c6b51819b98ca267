"""Keeping the workers in step with the database.

Operators and other daemons change tasks in the database: they pause, resume, cancel
or re-enqueue them, and time passes their deadlines. Every half second the
supervisor compares what its workers run with its leases, and this module says what
to do about each difference. One query covers the leases; workers whose lease has
gone (their task ended, or was taken away) cost a second one.
"""

import enum
import logging
from dataclasses import dataclass

from django.db.models import BooleanField, ExpressionWrapper, Q
from django.db.models.functions import Now

from atp import engine
from atp.daemon.outage import CONNECTION_ERRORS, TASK_MOVED_ON
from atp.daemon.pool import Ending
from atp.models import Instance, Task
from atp.states import IN_FLIGHT, Status

logger = logging.getLogger(__name__)

#: How long a worker whose task ended (in the database) has to report it itself.
ENDED_REPORT_GRACE_SECONDS = 5.0

TAKEN_BECAUSE = {
    Status.ACCEPTED: "the task was re-enqueued",
    Status.CANCELLED: "the task was cancelled",
    Status.FAILED: "an operator marked the task FAILED",
    Status.FINISHED: "an operator marked the task FINISHED",
}


class Action(enum.Enum):
    STOP = "stop"  # stop the worker's task with an Ending
    SUSPEND = "suspend"
    RESUME = "resume"
    HAND_BACK = "hand back"  # a lease no worker runs, task in flight: back to the queue
    RELEASE = "release"  # a lease no worker runs, task taken by an operator: let go


@dataclass(frozen=True)
class Decision:
    """What the supervisor should do about one worker, or one lease no worker runs."""

    action: Action
    worker: object = None
    ending: Ending = None
    reason: str = ""
    pk: int = None
    attempt: int = None


def decide(pool, daemon, now):
    """Return the decisions that bring ``pool`` in step with ``daemon``'s leases."""
    leases = {
        pk: (status, attempt, overdue)
        for pk, status, attempt, overdue in Task.objects.filter(daemon=daemon).annotate(
            overdue=ExpressionWrapper(
                Q(deadline__lt=Now(), paused_since__isnull=True), output_field=BooleanField()
            )
        ).values_list("instance_id", "instance__status", "instance__attempt", "overdue")
    }
    workers = pool.busy()
    running = {worker.assignment.pk for worker in workers}
    decisions = [
        Decision(Action.HAND_BACK if status in IN_FLIGHT else Action.RELEASE,
                 pk=pk, attempt=attempt, reason="its daemon had lost track of it")
        for pk, (status, attempt, _) in leases.items() if pk not in running
    ]
    active = [worker for worker in workers if worker.assignment.ending is None]
    unleased = [w.assignment.pk for w in active if w.assignment.pk not in leases]
    states = {
        pk: (status, attempt) for pk, status, attempt in
        Instance.objects.filter(pk__in=unleased).values_list("pk", "status", "attempt")
    } if unleased else {}
    for worker in active:
        pk = worker.assignment.pk
        if pk in leases:
            decision = _leased(worker, *leases[pk])
        else:
            decision = _unleased(worker, states.get(pk), now)
        if decision is not None:
            decisions.append(decision)
    return decisions


def _leased(worker, status, attempt, overdue):
    assignment = worker.assignment
    if attempt != assignment.attempt:
        return Decision(Action.STOP, worker, Ending.SUPERSEDED, f"attempt {attempt} replaced it")
    if status not in IN_FLIGHT:
        return Decision(Action.STOP, worker, Ending.TAKEN, TAKEN_BECAUSE[status])
    if overdue:
        return Decision(Action.STOP, worker, Ending.TIME_OUT,
                        f"time-out after {assignment.timeout_seconds:g} s")
    # What the worker is, not what it was told: a pause asked for between tasks, or
    # before the handler began, did not take, and is asked again.
    if status == Status.PAUSED and not worker.is_stopped():
        return Decision(Action.SUSPEND, worker)
    if status != Status.PAUSED and (worker.is_suspended or worker.is_stopped()):
        return Decision(Action.RESUME, worker)
    return None


def _unleased(worker, state, now):
    assignment = worker.assignment
    if state is None:
        return Decision(Action.STOP, worker, Ending.GONE, "the task was deleted")
    status, attempt = state
    if attempt != assignment.attempt or status not in (Status.FINISHED, Status.FAILED):
        return Decision(Action.STOP, worker, Ending.SUPERSEDED, "the task went on without it")
    # FINISHED or FAILED on this attempt and off the queue: the worker wrote it and is
    # about to say so; if it does not, it is stuck after its last write.
    if assignment.ended_seen_at is None:
        assignment.ended_seen_at = now
    elif now - assignment.ended_seen_at > ENDED_REPORT_GRACE_SECONDS:
        return Decision(Action.STOP, worker, Ending.ENDED, f"the task is {status}")
    return None


def apply(decisions, daemon, stop):
    """Carry out ``decisions`` for ``daemon``; ``stop(worker, ending, reason)`` stops a task.

    A decision about a task that moved on meanwhile is skipped; one failing otherwise
    is logged, and the others are still carried out.
    """
    for decision in decisions:
        try:
            _apply(decision, daemon, stop)
        except CONNECTION_ERRORS:
            raise
        except TASK_MOVED_ON as exc:
            logger.info("%s of task id=%s skipped: %s", decision.action.value, decision.pk, exc)
        except Exception:
            logger.exception("%s of task id=%s failed", decision.action.value, decision.pk)


def _apply(decision, daemon, stop):
    if decision.action == Action.STOP:
        stop(decision.worker, decision.ending, decision.reason)
    elif decision.action == Action.SUSPEND:
        decision.worker.suspend()
    elif decision.action == Action.RESUME:
        decision.worker.resume()
    elif decision.action == Action.HAND_BACK:
        engine.hand_back(decision.pk, decision.reason, attempt=decision.attempt, daemon=daemon)
    elif decision.action == Action.RELEASE:
        engine.release(decision.pk, daemon=daemon)
