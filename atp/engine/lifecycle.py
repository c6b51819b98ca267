"""The verbs a daemon applies to the tasks it holds.

Each passes the ``attempt`` it runs: once the task moved on (a newer attempt, or an
operator's change), the write is refused with ``AttemptSuperseded`` or
``InvalidTransition`` (fencing). A daemon's lease on a task (``Task.daemon``) is given
up only here: when its worker ends the task (``finish``, ``fail``), when the daemon
hands it back or restarts it after its worker is gone (``hand_back``, ``restart``), or
when it lets go of a task an operator took from it (``release``). Verbs that decide
from the task's rows lock them first (``atp.engine.locks``). Verbs return the task's
attempt number.

A task that was PAUSED when its attempt was lost (its daemon stopped or died) is not
run again on its own: it is *held*, PAUSED with an unleased queue row that no claim
takes, until an operator resumes it (``steering.resume``) or re-enqueues it.
"""

import datetime

from django.db import transaction
from django.db.models import DateTimeField, ExpressionWrapper, F, Subquery
from django.db.models.functions import Greatest, Now

from atp.db import database_now
from atp.engine.base import database, pk_of, queue_write
from atp.engine.engines import engine
from atp.engine.locks import lock_task
from atp.engine.notify import notify_runnable
from atp.engine.outcomes import one_per_task
from atp.engine.records import store_encoded, store_response
from atp.engine.semaphores import due_at
from atp.engine.transitions import move, refusal, write_history
from atp.exceptions import InvalidTransition, TaskNotFound
from atp.models import Instance, LogRecord, Task, Type
from atp.retry import RetryPolicy
from atp.states import IN_FLIGHT, Status, sources_of


def queue_row(pk):
    """Return the queue row of task ``pk`` as a queryset."""
    return Task.objects.filter(instance_id=pk)


def release_lease(pk, *, hold=False):
    """Make task ``pk``'s queue row unleased; ``hold`` keeps it out of claims (paused)."""
    changes = {"daemon": None, "claimed": None, "deadline": None}
    if not hold:
        changes["paused_since"] = None
    queue_row(pk).update(**changes)


@queue_write
def start(instance, *, attempt=None, daemon=None, by=None):
    """Move a SCHEDULED task to RUNNING (its time-out clock runs since the claim)."""
    return start_attempt(pk_of(instance), attempt, daemon, by)


def start_and_load(instance, *, attempt, daemon=None):
    """Start attempt ``attempt`` of a task; return the task with its type and inputs loaded."""
    return engine().start(pk_of(instance), attempt, daemon)


def start_attempt(pk, attempt, daemon, by=None, *, seconds_ago=None):
    """Move task ``pk`` from SCHEDULED to RUNNING on ``attempt``, in the caller's transaction.

    ``seconds_ago`` dates the start (and its history entry) that long before now: a
    prefetched task whose start is written after it began.
    """
    at = Now()
    if seconds_ago:  # never before its claim (``Task.claimed``), as every engine dates it
        claimed = queue_row(pk).values("claimed")[:1]
        at = Greatest(ExpressionWrapper(Now() - datetime.timedelta(seconds=seconds_ago),
                                        output_field=DateTimeField()), Subquery(claimed))
    return move(
        pk, Status.RUNNING, sources={Status.SCHEDULED}, attempt=attempt,
        changes={"started": at}, daemon=daemon, by=by, dated_by="started",
    )


def finish(instance, message="", *, attempt=None, daemon=None, response=None,
           content_type=None, by=None):
    """Move a RUNNING (or just paused) task to FINISHED and take it off the queue.

    A ``response`` other than None is stored in the same transaction (see
    ``set_response``); raise ``InvalidResponse`` for one that cannot be stored.
    Without ``attempt`` (an operator's call) a daemon holding the task keeps its
    lease until it has stopped the worker.
    """
    pk = pk_of(instance)
    if attempt is not None:  # a daemon's: its engine's
        return engine().finish(pk, attempt, message, daemon, response, content_type)
    return finish_in_transaction(pk, message, attempt, daemon, response, content_type, by)


@queue_write
def finish_in_transaction(pk, message, attempt, daemon, response, content_type, by=None):
    """``finish``'s portable form, in the caller's (or its own) transaction."""
    _leave_queue(pk, attempt, Status.FINISHED)
    if response is not None:
        store_response(pk, response, content_type)
    return move(
        pk, Status.FINISHED, sources={Status.RUNNING, Status.PAUSED}, attempt=attempt,
        changes={"finished": Now()}, message=message, daemon=daemon, by=by,
    )


def settle(daemon, outcomes):
    """Write the ends of attempts ``daemon`` ran (``atp.engine.outcomes.Outcome``, FINISHED
    or FAILED), and the starts not written yet, together; return the keys of the tasks
    written.

    Each is guarded and fenced by its attempt as ``finish`` and ``fail`` are: one whose
    attempt was superseded, or whose task went on (an operator ended or re-enqueued
    it), writes nothing, and the others are written all the same.
    """
    outcomes = one_per_task(outcomes)
    if not outcomes:
        return set()
    return engine().settle(daemon, outcomes)


def settle_each(daemon, outcomes):
    """``settle``'s portable form, in the caller's transaction: each outcome in a
    savepoint of its own, so that one refused leaves the others written."""
    written = set()
    for outcome in outcomes:
        try:
            with transaction.atomic(using=database()):
                _end(outcome, daemon)
        except (InvalidTransition, TaskNotFound):
            continue
        written.add(outcome.pk)
    return written


def _end(outcome, daemon):
    pk, attempt = outcome.pk, outcome.attempt
    if outcome.started_ago is not None:
        locked = lock_task(pk)  # the queue row, then the task
        if not locked.is_leased or locked.attempt != attempt:
            raise refusal(pk, outcome.status, attempt=attempt)
        if locked.status == Status.SCHEDULED:
            start_attempt(pk, attempt, daemon, seconds_ago=outcome.started_ago)
        elif outcome.status == Status.RUNNING:  # started already: nothing to write
            raise refusal(pk, Status.RUNNING, attempt=attempt)
        if outcome.status == Status.RUNNING:
            return
    _leave_queue(pk, attempt, outcome.status)
    if outcome.response is not None:
        store_encoded(pk, *outcome.response)
    move(pk, outcome.status, sources=sources_of(outcome.status), attempt=attempt,
         changes={"finished": Now()}, message=outcome.message, daemon=daemon)


@queue_write
def fail(instance, message="", *, attempt=None, daemon=None, by=None):
    """Move an in-flight task to FAILED, with the reason, and take it off the queue.

    Without ``attempt`` (an operator's call) a daemon holding the task keeps its
    lease until it has stopped the worker.
    """
    pk = pk_of(instance)
    _leave_queue(pk, attempt, Status.FAILED)
    return move(
        pk, Status.FAILED, sources=set(IN_FLIGHT), attempt=attempt,
        changes={"finished": Now()}, message=message, daemon=daemon, by=by,
    )


@queue_write
def fail_or_retry(instance, message="", *, attempt, daemon=None, countdown=None):
    """End attempt ``attempt`` of a task whose handler failed, by its type's retry policy
    (``atp.retry``): back to the queue, due after the policy's wait (or ``countdown``
    seconds, a handler's ``atp.Retry``), while its limits allow; else FAILED. Either
    way ``message`` (the traceback) goes to the history, and a retry says when it is
    due. A PAUSED task is retried once resumed. Return the attempt.
    """
    pk = pk_of(instance)
    locked = _lock_leased(pk, attempt)
    policy = RetryPolicy.of(Type.objects.get(pk=locked.type_id))
    retries = Instance.objects.values_list("retries", flat=True).get(pk=pk)
    now = database_now(database())
    first_ran = (LogRecord.objects.filter(instance_id=pk, status=Status.RUNNING)
                 .order_by("id").values_list("time", flat=True).first()) or now
    if not policy.allows(retries, now - first_ran):
        if policy.retries:
            message = (f"{message}\nnot retried: {policy.describe()} reached "
                       f"({retries} retries, first run {(now - first_ran).total_seconds():g} s ago)")
        elif countdown is not None:
            message = f"{message}\nnot retried: its type allows no retry (retry_limit, age_limit)"
        queue_row(pk).delete()
        return move(pk, Status.FAILED, sources=set(IN_FLIGHT), attempt=attempt,
                    changes={"finished": now}, message=message.strip(), daemon=daemon,
                    dated_by="finished")
    number = retries + 1
    wait = (datetime.timedelta(seconds=countdown) if countdown is not None
            else policy.backoff(number))
    due = now + wait
    retry = f"retry {number} ({policy.describe()})"
    Instance.objects.filter(pk=pk).update(retries=F("retries") + 1)
    if locked.status == Status.PAUSED:
        message = f"{message}\n{retry} when the task is resumed".strip()
        return hold(locked, attempt, message, daemon=daemon, spends_restart=False)
    return _due_again(pk, attempt, due, wait, f"{message}\n{retry}", daemon)


def _due_again(pk, attempt, due, wait, said, daemon):
    """Put task ``pk`` back in the queue, its attempt ``attempt`` over, due at ``due`` (in
    ``wait``); its history says ``said`` and when (a retry's, a snooze's). Return the
    attempt."""
    message = (f"{said} due at {due.isoformat(timespec='milliseconds')}, "
               f"in {wait.total_seconds():g} s").strip()
    release_lease(pk)
    queue_row(pk).update(**due_at(due))
    attempt = move(pk, Status.ACCEPTED, sources=set(IN_FLIGHT), attempt=attempt,
                   changes={"started": None}, message=message, daemon=daemon)
    # Every daemon looks again: one that is idle learns when the task is due.
    notify_runnable()
    return attempt


@queue_write
def snooze(instance, seconds, message="", *, attempt, daemon=None):
    """End attempt ``attempt`` of a task whose handler snoozed (``atp.Snooze``): back to the
    queue, due in ``seconds``, spending no retry and no restart, its ``snoozes`` counted.
    The snooze after its type's ``max_snoozes`` fails the task instead. A PAUSED task
    runs again once resumed. ``message`` (the handler's reason) goes to the history with
    when the task is due. Return the attempt."""
    pk = pk_of(instance)
    locked = _lock_leased(pk, attempt)
    most = Type.objects.values_list("max_snoozes", flat=True).get(pk=locked.type_id)
    snoozes = Instance.objects.values_list("snoozes", flat=True).get(pk=pk)
    if most is not None and snoozes >= most:
        queue_row(pk).delete()
        refused = (f"snoozed again after {snoozes} snooze{'' if snoozes == 1 else 's'}, its "
                   "type's max_snoozes: failed instead")
        return move(pk, Status.FAILED, sources=set(IN_FLIGHT), attempt=attempt,
                    changes={"finished": Now()}, message=f"{message}\n{refused}".strip(),
                    daemon=daemon)
    number = snoozes + 1
    counted = f"snooze {number}" + ("" if most is None else f" of at most {most}")
    Instance.objects.filter(pk=pk).update(snoozes=F("snoozes") + 1)
    if locked.status == Status.PAUSED:
        message = f"{message}\nsnoozed ({counted}): it runs again once resumed".strip()
        return hold(locked, attempt, message, daemon=daemon, spends_restart=False)
    wait = datetime.timedelta(seconds=seconds)
    return _due_again(pk, attempt, database_now(database()) + wait, wait,
                      f"{message}\nsnoozed ({counted}):", daemon)


def expired(expires):
    """Return what the history of a task cancelled as it expired says."""
    return f"expired: not started by {expires.isoformat(timespec='milliseconds')}"


@queue_write
def expire_attempt(instance, *, attempt, daemon=None):
    """Cancel a task whose prefetched attempt ``attempt`` reached its worker after the
    task's ``expires``, and which the worker did not start: no attempt starts after it.
    Return the attempt; raise ``InvalidTransition`` or ``AttemptSuperseded`` when the
    attempt is not held under this lease any more (an operator or a reaper moved the
    task on)."""
    pk = pk_of(instance)
    _lock_leased(pk, attempt)
    expires = Instance.objects.values_list("expires", flat=True).get(pk=pk)
    if expires is None:
        raise InvalidTransition(f"task #{pk} does not expire", target=Status.CANCELLED)
    _leave_queue(pk, attempt, Status.CANCELLED)
    # RUNNING too: its supervisor may have written its start (a task at the head of its
    # worker's queue has started, as far as it can tell) before the worker said no.
    return move(pk, Status.CANCELLED, sources={Status.SCHEDULED, Status.RUNNING},
                attempt=attempt, changes={"finished": Now()}, message=expired(expires),
                daemon=daemon)


def _leave_queue(pk, attempt, target):
    if attempt is not None:
        # The holder of an attempt ends it itself, and only while it holds the lease.
        if not queue_row(pk).filter(daemon__isnull=False).delete()[0]:
            raise refusal(pk, target, attempt=attempt)
        return
    drop_waiting_row(pk)


def drop_waiting_row(pk):
    """Lock task ``pk`` and delete its queue row unless a daemon holds it; return ``Locked``.

    For an operator ending a task: a lease stays with the daemon that holds it, which
    lets go once its worker is stopped; an unleased row (queued, or held) goes now.
    """
    locked = lock_task(pk)
    if locked.has_row and not locked.is_leased:
        queue_row(pk).delete()
    return locked


@queue_write
def restart(instance, reason, *, attempt=None, daemon=None):
    """Re-enqueue an in-flight task whose attempt was lost, spending one restart.

    Once the type's ``max_restarts`` are spent the task ends FAILED instead, with
    ``reason`` and "restart limit reached" in its history. A PAUSED task is held
    instead of re-enqueued. Call it only once no worker runs the attempt any more.
    """
    pk = pk_of(instance)
    locked = _lock_leased(pk, attempt)
    limit = Type.objects.values_list("max_restarts", flat=True).get(pk=locked.type_id)
    spent = locked.restarts
    if spent >= limit:
        queue_row(pk).delete()
        return move(
            pk, Status.FAILED, sources=set(IN_FLIGHT), attempt=attempt,
            changes={"finished": Now()}, daemon=daemon,
            message=f"{reason}; restart limit reached ({limit} restarts)",
        )
    reason = f"{reason}; restart {spent + 1} of {limit}"
    if locked.status == Status.PAUSED:
        return hold(locked, attempt, reason, daemon=daemon, spends_restart=True)
    release_lease(pk)
    attempt = move(
        pk, Status.ACCEPTED, sources=set(IN_FLIGHT), attempt=attempt,
        changes={"restarts": F("restarts") + 1, "started": None},
        daemon=daemon, message=reason,
    )
    notify_runnable()
    return attempt


@queue_write
def hand_back(instance, message="", *, attempt=None, daemon=None):
    """Return an in-flight task to the queue without spending a restart (shutdown).

    A PAUSED task is held instead: it runs again once an operator resumes it.
    """
    pk = pk_of(instance)
    locked = _lock_leased(pk, attempt)
    message = message or "handed back"
    if locked.status == Status.PAUSED:
        return hold(locked, attempt, message, daemon=daemon, spends_restart=False)
    release_lease(pk)
    attempt = move(
        pk, Status.ACCEPTED, sources=set(IN_FLIGHT), attempt=attempt,
        changes={"started": None}, message=message, daemon=daemon,
    )
    notify_runnable()
    return attempt


def _lock_leased(pk, attempt):
    """Lock task ``pk``; raise unless a daemon holds it (an attempt to lose)."""
    locked = lock_task(pk)
    if not locked.is_leased:
        error = refusal(pk, Status.ACCEPTED, attempt=attempt)
        if type(error) is InvalidTransition:
            error = InvalidTransition(
                f"task #{pk} is {locked.status} and no daemon holds it: it has no attempt "
                "to lose", current=locked.status, target=Status.ACCEPTED)
        raise error
    return locked


def hold(locked, attempt, reason, *, daemon, spends_restart):
    """Keep a PAUSED task whose attempt was lost paused, off its daemon, until resumed.

    Its state stays PAUSED (an operator paused it and nobody resumed it), its queue row
    loses its lease and keeps ``paused_since``, which keeps it out of claims.
    """
    pk = locked.pk
    rows = Instance.objects.filter(pk=pk, status=Status.PAUSED)
    if attempt is not None:
        rows = rows.filter(attempt=attempt)
    changes = {"updated": Now(), "started": None}
    if spends_restart:
        changes["restarts"] = F("restarts") + 1
    if not rows.update(**changes):
        raise refusal(pk, Status.ACCEPTED, attempt=attempt)
    release_lease(pk, hold=True)
    write_history(
        pk, None, locked.attempt, f"{reason}; attempt {locked.attempt} is lost and the task "
        "stays paused: resume it to run it again", daemon,
    )
    return locked.attempt


@queue_write
def release(instance, *, daemon):
    """Let go of ``daemon``'s lease on a task an operator took from it; return whether it held one.

    Call it once no worker of the daemon runs the task. A re-enqueued task becomes
    claimable; an ended one leaves the queue. Raise ``InvalidTransition`` for a task
    still in flight: hand it back or restart it instead.
    """
    pk = pk_of(instance)
    locked = lock_task(pk)
    if locked.lease != getattr(daemon, "pk", daemon):
        return False
    if locked.status in IN_FLIGHT:
        raise InvalidTransition(
            f"task #{pk} is {locked.status}: hand it back or restart it instead",
            current=locked.status,
        )
    if locked.status == Status.ACCEPTED:
        release_lease(pk)
        notify_runnable()
    else:
        queue_row(pk).delete()
    return True
