"""The verbs a daemon applies to the tasks it holds.

Each passes the ``attempt`` it runs: once the task moved on (a newer attempt, or an
operator's change), the write is refused with ``AttemptSuperseded`` or
``InvalidTransition`` (fencing). A daemon's lease on a task (``Task.daemon``) is given
up only here: when its worker ends the task (``finish``, ``fail``), when the daemon
hands it back or restarts it after its worker is gone (``hand_back``, ``restart``), or
when it lets go of a task an operator took from it (``release``). Verbs return the
task's attempt number.
"""

from django.db.models import F, OuterRef, Subquery
from django.db.models.functions import Now

from atp.engine import hotpath
from atp.engine.base import pk_of, queue_write
from atp.engine.notify import notify_runnable
from atp.engine.records import store_response
from atp.engine.transitions import move, refusal
from atp.exceptions import InvalidTransition
from atp.models import Instance, Task, Type
from atp.states import IN_FLIGHT, Status


def queue_row(pk):
    """Return the queue row of task ``pk`` as a queryset."""
    return Task.objects.filter(instance_id=pk)


def _release_lease(rows):
    rows.update(daemon=None, claimed=None, deadline=None, paused_since=None)


@queue_write
def start(instance, *, attempt=None, daemon=None):
    """Move a SCHEDULED task to RUNNING and start its time-out clock."""
    return _start(pk_of(instance), attempt, daemon)


@queue_write
def start_and_load(instance, *, attempt, daemon=None):
    """Start attempt ``attempt`` of a task; return the task with its type and inputs loaded."""
    pk = pk_of(instance)
    if hotpath.is_available():
        return hotpath.start(pk, attempt, daemon)
    _start(pk, attempt, daemon)
    return Instance.objects.select_related("type", "inputs").get(pk=pk)


def _start(pk, attempt, daemon):
    timeout = Subquery(Type.objects.filter(pk=OuterRef("type_id")).values("timeout")[:1])
    queue_row(pk).update(deadline=Now() + timeout)
    return move(
        pk, Status.RUNNING, sources={Status.SCHEDULED}, attempt=attempt,
        changes={"started": Now()}, daemon=daemon,
    )


@queue_write
def finish(instance, message="", *, attempt=None, daemon=None, response=None,
           content_type=None):
    """Move a RUNNING (or just paused) task to FINISHED and take it off the queue.

    A ``response`` other than None is stored in the same transaction (see
    ``set_response``); raise ``InvalidResponse`` for one that cannot be stored.
    Without ``attempt`` (an operator's call) a daemon holding the task keeps its
    lease until it has stopped the worker.
    """
    pk = pk_of(instance)
    if attempt is not None and hotpath.is_available():
        return hotpath.finish(pk, attempt, message, daemon, response, content_type)
    _leave_queue(pk, attempt)
    if response is not None:
        store_response(pk, response, content_type)
    return move(
        pk, Status.FINISHED, sources={Status.RUNNING, Status.PAUSED}, attempt=attempt,
        changes={"finished": Now()}, message=message, daemon=daemon,
    )


@queue_write
def fail(instance, message="", *, attempt=None, daemon=None):
    """Move an in-flight task to FAILED, with the reason, and take it off the queue.

    Without ``attempt`` (an operator's call) a daemon holding the task keeps its
    lease until it has stopped the worker.
    """
    pk = pk_of(instance)
    _leave_queue(pk, attempt)
    return move(
        pk, Status.FAILED, sources=set(IN_FLIGHT), attempt=attempt,
        changes={"finished": Now()}, message=message, daemon=daemon,
    )


def _leave_queue(pk, attempt):
    rows = queue_row(pk)
    # The holder of an attempt ends it itself; anyone else must leave a lease to the
    # daemon that holds it, which lets go once its worker is stopped.
    (rows if attempt is not None else rows.filter(daemon__isnull=True)).delete()


@queue_write
def restart(instance, reason, *, attempt=None, daemon=None):
    """Re-enqueue an in-flight task whose attempt was lost, spending one restart.

    Once the type's ``max_restarts`` are spent the task ends FAILED instead, with
    ``reason`` and "restart limit reached" in its history. Call it only once no
    worker runs the attempt any more.
    """
    pk = pk_of(instance)
    row = Instance.objects.values("restarts", "type__max_restarts").filter(pk=pk).first()
    if row is None:
        raise refusal(pk, Status.ACCEPTED, attempt=attempt)
    spent, limit = row["restarts"], row["type__max_restarts"]
    if spent >= limit:
        queue_row(pk).delete()
        return move(
            pk, Status.FAILED, sources=set(IN_FLIGHT), attempt=attempt,
            where={"restarts": spent}, changes={"finished": Now()}, daemon=daemon,
            message=f"{reason}; restart limit reached ({limit} restarts)",
        )
    _release_lease(queue_row(pk))
    attempt = move(
        pk, Status.ACCEPTED, sources=set(IN_FLIGHT), attempt=attempt,
        where={"restarts": spent}, changes={"restarts": F("restarts") + 1, "started": None},
        daemon=daemon, message=f"{reason}; restart {spent + 1} of {limit}",
    )
    notify_runnable()
    return attempt


@queue_write
def hand_back(instance, message="", *, attempt=None, daemon=None):
    """Return an in-flight task to the queue without spending a restart (shutdown)."""
    pk = pk_of(instance)
    _release_lease(queue_row(pk))
    attempt = move(
        pk, Status.ACCEPTED, sources=set(IN_FLIGHT), attempt=attempt,
        changes={"started": None}, message=message or "handed back", daemon=daemon,
    )
    notify_runnable()
    return attempt


@queue_write
def release(instance, *, daemon):
    """Let go of ``daemon``'s lease on a task an operator took from it; return whether it held one.

    Call it once no worker of the daemon runs the task. A re-enqueued task becomes
    claimable; an ended one leaves the queue. Raise ``InvalidTransition`` for a task
    still in flight: hand it back or restart it instead.
    """
    pk = pk_of(instance)
    lease = queue_row(pk).filter(daemon=daemon)
    # The queue row is locked before the task is read, as in every queue transaction.
    if not list(lease.select_for_update().values_list("pk", flat=True)):
        return False
    status = Instance.objects.filter(pk=pk).values_list("status", flat=True).first()
    if status in IN_FLIGHT:
        raise InvalidTransition(
            f"task #{pk} is {status}: hand it back or restart it instead", current=status
        )
    if status == Status.ACCEPTED:
        _release_lease(lease)
        notify_runnable()
    else:
        lease.delete()
    return True
