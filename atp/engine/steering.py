"""The verbs operators steer tasks with: pause, resume, cancel, re-enqueue, run again,
run now, set a state.

They apply to whatever attempt is current, and they never take a lease from the
daemon running the task: they change the task's state, and the daemon follows within
half a second, suspending, resuming or stopping the worker, and only then lets go of
the task (``lifecycle.release``). So a re-enqueued or cancelled-then-retried task can
never run while its previous worker still does. Verbs return the task's attempt, but
``run_again``, which returns the new task.
"""

from django.db import IntegrityError
from django.db.models import F
from django.db.models.functions import Now

from atp.db import database_now
from atp.engine.base import database, pk_of, queue_write
from atp.engine.batches import hold_open
from atp.engine.enqueue import enqueue
from atp.engine.lifecycle import (
    drop_waiting_row,
    fail,
    finish,
    queue_row,
    release_lease,
    start,
)
from atp.engine.locks import lock_task
from atp.engine.notify import notify_runnable
from atp.engine.semaphores import due_at, holds_of, requeued
from atp.engine.transitions import move, refusal, write_history
from atp.exceptions import InvalidTransition, NotDelayed, TaskAlreadyExists
from atp.models import Daemon, Inputs, Instance, Task, Type
from atp.states import IN_FLIGHT, LIVE, TERMINAL, Status

ENDED_FOR_RETRY = (Status.FAILED, Status.CANCELLED)


@queue_write
def pause(instance, message="", *, by=None):
    """Move a RUNNING task to PAUSED and stop its time-out clock; its daemon suspends the worker."""
    pk = pk_of(instance)
    locked = lock_task(pk)
    if Type.objects.filter(pk=locked.type_id, pull=True).exists():
        raise InvalidTransition(
            f"task #{pk} is of a pull type: its consumer, outside atpd, cannot be suspended "
            "(cancel or re-enqueue it instead)", current=locked.status, target=Status.PAUSED)
    queue_row(pk).filter(paused_since__isnull=True).update(paused_since=Now())
    return move(pk, Status.PAUSED, sources={Status.RUNNING}, message=message or "paused", by=by)


@queue_write
def resume(instance, message="", *, by=None):
    """Resume a PAUSED task.

    A task its daemon still runs goes back to RUNNING, its deadline moved by the time
    it was paused. A task held after its daemon went away goes back to the queue as
    ACCEPTED, to run again from the start.
    """
    pk = pk_of(instance)
    locked = lock_task(pk)
    if locked.is_held:
        queue_row(pk).update(paused_since=None, **due_at(Now()))
        attempt = move(
            pk, Status.ACCEPTED, sources={Status.PAUSED}, changes={"started": None},
            message=message or f"resumed: attempt {locked.attempt} was lost while paused, "
                               "so the task starts again", by=by,
        )
        notify_runnable()
        return attempt
    queue_row(pk).filter(paused_since__isnull=False).update(
        deadline=F("deadline") + (Now() - F("paused_since")), paused_since=None
    )
    return move(pk, Status.RUNNING, sources={Status.PAUSED}, message=message or "resumed", by=by)


@queue_write
def cancel(instance, message="", *, by=None):
    """Move a live task to CANCELLED; a queued one leaves the queue, a running one is stopped."""
    pk = pk_of(instance)
    drop_waiting_row(pk)
    return move(
        pk, Status.CANCELLED, sources=set(LIVE), changes={"finished": Now()},
        message=message or "cancelled", by=by,
    )


@queue_write
def reenqueue(instance, message="", *, by=None):
    """Put a task back in the queue as ACCEPTED, as an operator would.

    An in-flight task is stopped by its daemon and claimable again once its worker
    is gone. A failed or cancelled task is retried with a fresh restart budget; raise
    ``TaskAlreadyExists`` if a live task has taken its identifier meanwhile. A queued
    or finished task is refused with ``InvalidTransition``. No restart is counted.
    """
    pk = pk_of(instance)
    locked = lock_task(pk)
    if locked.status in ENDED_FOR_RETRY:
        return _retry_ended(locked, message or f"re-enqueued after {locked.status}", by)
    if locked.status not in IN_FLIGHT:
        raise refusal(pk, Status.ACCEPTED)
    # A lease stays with its daemon until it has stopped the worker, and with a pull
    # consumer, which cannot be stopped, until its deadline; a held task's row is
    # claimable at once.
    if locked.is_leased and Daemon.objects.filter(pk=locked.lease, consumer__isnull=False).exists():
        queue_row(pk).update(paused_since=None)
    else:
        queue_row(pk).update(deadline=None, paused_since=None)
    attempt = move(
        pk, Status.ACCEPTED, sources=set(IN_FLIGHT), changes={"started": None},
        message=message or "re-enqueued", by=by,
    )
    if not locked.is_leased:
        notify_runnable()
    return attempt


@queue_write
def run_again(instance, message="", *, by=None):
    """Queue a new task of an ended task's type, with its inputs, priority and tag; return it.

    The ended task stays as it is. The new one gets an identifier of its own (the old
    name stays taken for its type's ``dedup_window``), belongs to no batch, and its
    history says whose run again of which task it is. Raise ``InvalidTransition`` for
    a task that has not ended.
    """
    pk = pk_of(instance)
    # Locked so that no purge deletes it (and its inputs) while it is copied.
    locked = lock_task(pk)
    if locked.status not in TERMINAL:
        raise InvalidTransition(
            f"task #{pk} is {locked.status}: only an ended task runs again",
            current=locked.status)
    task_type = Type.objects.get(pk=locked.type_id)
    new = enqueue(task_type, None, priority=locked.priority, tag=locked.tag,
                  **holds_of(pk, task_type))
    # The inputs as they were stored: a signed pickle keeps its signature and is never
    # unpickled in the web process.
    stored = Inputs.objects.filter(pk=pk).values("input_format", "data").first()
    if stored is not None:
        Inputs.objects.filter(pk=new.pk).update(**stored)
    write_history(new.pk, None, 0, message or f"a run again of task #{pk}", by=by)
    return new


@queue_write
def run_now(instance, message="", *, by=None):
    """Make a delayed task runnable now: its not-before time becomes the database's now.

    The next claim of its type takes it (within its type's limits and priority). Raise
    ``NotDelayed`` for a queued task already runnable, ``InvalidTransition`` for a task
    that is not queued.
    """
    pk = pk_of(instance)
    locked = lock_task(pk)
    if locked.status != Status.ACCEPTED:
        raise InvalidTransition(
            f"task #{pk} is {locked.status}: only a queued task runs now",
            current=locked.status)
    waiting = queue_row(pk).filter(not_before__gt=Now())
    due = waiting.values_list("not_before", flat=True).first()
    if due is None or not waiting.update(**due_at(Now())):
        raise NotDelayed(f"task #{pk} is not delayed: it runs when a daemon is free",
                         current=locked.status)
    write_history(pk, None, locked.attempt,
                  message or f"run now (it was due at {due.isoformat(timespec='seconds')})",
                  by=by)
    notify_runnable()
    return locked.attempt


def _retry_ended(locked, message, by):
    pk = locked.pk
    batch_id = Instance.objects.filter(pk=pk).values_list("batch_id", flat=True).get()
    if batch_id is not None and not hold_open(batch_id):
        message += f"; its batch #{batch_id} completed already and does not complete again"
    # An operator's re-enqueue runs the task: its expiry, if it had one, is gone.
    attempt = move(
        pk, Status.ACCEPTED, sources=set(ENDED_FOR_RETRY),
        changes={"restarts": 0, "retries": 0, "snoozes": 0, "started": None,
                 "finished": None, "expires": None},
        message=message, by=by,
    )
    queue_row(pk).update(expires=None)
    if locked.is_leased:
        return attempt  # its daemon is still stopping the last worker; it lets go then
    if locked.has_row:
        release_lease(pk)  # a stray row (see atp.invariants) serves again
    else:
        now = database_now(database())
        try:
            # It holds its semaphores still: claimed only with their slots.
            Task.objects.create(
                instance_id=pk, type_id=locked.type_id, identifier=locked.identifier,
                priority=locked.priority, tag=locked.tag, enqueued=now, not_before=now,
                **requeued(pk, locked.type_id, locked.priority, now),
            )
        except IntegrityError:
            raise TaskAlreadyExists(
                f"task #{pk} cannot be re-enqueued: a live task of its type has taken the "
                f"identifier {locked.identifier!r}"
            ) from None
    notify_runnable()
    return attempt


def set_status(instance, status, message="", *, by=None):
    """Move a task to ``status`` through the verb that owns that change.

    Raise ``InvalidTransition`` for a change the state table does not allow, or that
    only the queue itself makes (SCHEDULED is reached by ``dequeue`` alone).
    """
    pk = pk_of(instance)
    try:
        target = Status(status)
    except ValueError:
        raise InvalidTransition(f"{status!r} is not a task state") from None
    if target == Status.RUNNING:
        current = Instance.objects.filter(pk=pk).values_list("status", flat=True).first()
        if current == Status.SCHEDULED:
            return start(pk, by=by)
        return resume(pk, message, by=by)
    verbs = {
        Status.ACCEPTED: reenqueue, Status.PAUSED: pause, Status.FINISHED: finish,
        Status.FAILED: fail, Status.CANCELLED: cancel,
    }
    if target not in verbs:
        raise refusal(pk, target)
    return verbs[target](pk, message, by=by)
