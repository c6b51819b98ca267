"""Pull-style leasing (App Engine's pull queues): consumers outside atpd lease the tasks
of pull types for a while, and end them with ``complete`` or ``fail``.

A consumer is a ``Daemon`` row with a ``consumer`` name, and its leases are queue rows
leased to it as a daemon's are: every guard of the queue holds for them unchanged
(a write is fenced by its attempt and needs the lease; an operator's cancel or
re-enqueue leaves the lease in place; the invariants of ``atp.invariants``). What
differs is how a lease ends: a consumer never heartbeats, and no reaper declares it
stopped; its lease ends at its ``deadline`` (database clock), unless it extends it.
Then the task is restarted, spending one of its type's ``max_restarts`` (FAILED beyond
them), by the next ``lease_tasks`` of its type or by the maintenance of any atpd
(``expire_leases``), and any write of the expired lease is refused (``LeaseExpired``).
"""

import datetime
import socket

from django.db.models import Q
from django.db.models.functions import Now

from atp.engine.base import queue_write
from atp.engine.claim import lease_rows, read_runnable, repair_stray_row, runnable_tasks
from atp.engine.engines import engine
from atp.engine.lifecycle import fail_or_retry, finish, queue_row, release, restart, start_attempt
from atp.engine.locks import lock_task
from atp.engine.transitions import refusal
from atp.engine.types import find_type
from atp.exceptions import InvalidParameter, InvalidTransition, LeaseExpired
from atp.models import (
    CONSUMER_MAX_LENGTH,
    TAG_MAX_LENGTH,
    Daemon,
    Instance,
    LogRecord,
    Task,
    Type,
)
from atp.serialization import check_text
from atp.states import IN_FLIGHT, Status

#: The consumer a lease is held by when ``lease_tasks`` is not told.
DEFAULT_CONSUMER = "pull"
#: At most this many tasks a lease (App Engine's).
LEASE_LIMIT_MAX = 1000
#: The longest lease, in seconds (App Engine's: a week).
LEASE_SECONDS_MAX = 7 * 24 * 3600
#: How many expired leases one ``expire_leases`` ends at most.
EXPIRE_BATCH_SIZE = 100
#: How the history says an attempt ended as its lease expired (``holder``: the consumer's
#: label); a refused write of that attempt reads it there to say so (``LeaseExpired``).
EXPIRED = "the lease of {holder} expired"


def lease_tasks(type_identifier, limit, lease_seconds, tag=None, group_by_tag=False, *,
                consumer=DEFAULT_CONSUMER):
    """Lease up to ``limit`` runnable tasks of pull type ``type_identifier`` for
    ``lease_seconds``; return them RUNNING, with their inputs, in claim order.

    Tasks are taken as atpd claims them (priority, then ``not_before``, then id),
    skipping tasks whose ``eta`` has not come and every task of a paused type. With
    ``tag`` only tasks tagged so are leased; with ``group_by_tag`` (and no ``tag``)
    only those sharing the tag of the first task in claim order (untagged ones, if it
    has none). Each task starts a new attempt (``Instance.attempt``, the lease's
    token) held by ``consumer`` (a name shown in the history and the admin). Leases
    that expired are ended first: their tasks are leasable again, each having spent
    a restart. Raise ``TaskTypeNotFound`` or ``InvalidParameter``; nothing is leased then.
    """
    task_type = find_type(type_identifier)
    if not task_type.pull:
        raise InvalidParameter(f"task type {task_type.identifier!r} is not a pull type: atpd "
                               "runs its tasks (register one with register_pull_type)")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= LEASE_LIMIT_MAX:
        raise InvalidParameter(f"limit must be an integer from 1 to {LEASE_LIMIT_MAX}, not {limit!r}")
    lease = clean_lease(lease_seconds)
    tag = clean_tag(tag)
    if not isinstance(group_by_tag, bool):
        raise InvalidParameter(f"group_by_tag must be True or False, not {group_by_tag!r}")
    consumer = _clean_consumer(consumer)
    expire_leases(type_ids=[task_type.pk])
    return engine().lease(task_type.pk, limit, lease, tag, group_by_tag, consumer)


def lease_in_transaction(type_id, limit, lease, tag, group_by_tag, consumer):
    """Lease up to ``limit`` runnable tasks of pull type ``type_id`` to ``consumer`` for
    ``lease`` (a timedelta), as ``lease_tasks`` says, in the caller's transaction; return
    them RUNNING with their type, inputs and holder. The portable form, with row locks
    that skip locked rows where the database has them (``read_runnable``)."""
    holder = _consumer(consumer)
    rows = runnable_tasks([type_id])
    if tag is not None:
        rows = rows.filter(tag=tag)
    elif group_by_tag:
        first = read_runnable(rows, ("tag",), 1)  # locks it: it is ours to lease
        if not first:
            return []
        [(tag,)] = first
        rows = rows.filter(tag=tag) if tag is not None else rows.filter(tag__isnull=True)
    pks = [pk for (pk,) in read_runnable(rows, ("instance_id",), limit)]
    # Read after the rows are locked: a task enqueued after the type stopped being a
    # pull type (or was paused) is seen with the type as it is now, and not leased.
    if not pks or not Type.objects.filter(pk=type_id, pull=True, is_paused=False).exists():
        return []
    instances, strays = lease_rows(holder, pks, lease=lease,
                                   message=f"leased for {lease.total_seconds():g} s")
    for pk in strays:
        repair_stray_row(pk)
    for instance in instances:
        start_attempt(instance.pk, instance.attempt, holder)
    position = {instance.pk: index for index, instance in enumerate(instances)}
    return sorted(Instance.objects.filter(pk__in=position).select_related("type", "inputs", "daemon"),
                  key=lambda instance: position[instance.pk])


def _consumer(name):
    """Return the ``Daemon`` row of consumer ``name``, made on its first lease."""
    # Never written after (but to take one back that was declared stopped): every lease
    # of a consumer refers to the row, and a write would make two leases of one
    # consumer wait for each other.
    holder, _ = Daemon.objects.get_or_create(consumer=name, defaults={
        "host": socket.gethostname()[:255], "pid": 0, "started": Now(), "heartbeat": Now()})
    if holder.stopped is not None:  # its leases were ended when it was: it starts anew
        Daemon.objects.filter(pk=holder.pk).update(stopped=None)
        holder.stopped = None
    return holder


@queue_write
def extend_lease(task, lease_seconds):
    """Make the lease of ``task`` (as ``lease_tasks`` returned it) end ``lease_seconds``
    from now; return the new deadline (database clock). Raise ``LeaseExpired`` once it
    expired or was taken over, ``InvalidTransition`` for a task an operator ended or
    re-enqueued, ``InvalidParameter``; nothing changes then."""
    lease = clean_lease(lease_seconds)
    pk, _ = _live_lease(task, "extension")
    queue_row(pk).update(deadline=Now() + lease)
    return queue_row(pk).values_list("deadline", flat=True).get()


@queue_write
def complete(task, response=None, content_type=None):
    """End ``task`` (as ``lease_tasks`` returned it) FINISHED, storing ``response`` if not
    None (see ``set_response``); return its attempt. Raise as ``extend_lease`` does, or
    ``InvalidResponse``; nothing changes then."""
    pk, holder = _live_lease(task, "completion", target=Status.FINISHED)
    return finish(pk, "completed", attempt=task.attempt, daemon=holder, response=response,
                  content_type=content_type)


@queue_write
def fail(task, message=""):
    """End the attempt of ``task`` (as ``lease_tasks`` returned it) as failed, with
    ``message`` in its history: it is retried by its type's retry policy (leasable
    again after the policy's wait) while the policy allows, else FAILED. Return its
    attempt. Raise as ``extend_lease`` does; nothing changes then."""
    check_text(message, "a failure message")
    pk, holder = _live_lease(task, "failure", target=Status.FAILED)
    return fail_or_retry(pk, message, attempt=task.attempt, daemon=holder)


def _live_lease(task, what, target=None):
    """Lock the rows of ``task``; return its key and the consumer holding its lease,
    while that lease is the one ``task`` was leased with and has not expired."""
    if not isinstance(task, Instance) or task.pk is None:
        raise InvalidParameter(f"{task!r} is not a task lease_tasks returned: its attempt is "
                               "the lease's token")
    pk, attempt = task.pk, task.attempt
    locked = lock_task(pk)
    if not Type.objects.filter(pk=locked.type_id, pull=True).exists():
        raise InvalidParameter(f"task #{pk} is not of a pull type: atpd runs it")
    if locked.attempt != attempt:
        raise refusal(pk, target, attempt=attempt)
    if locked.status not in IN_FLIGHT:
        raise _ended(pk, attempt, locked.status, what, target)
    live = queue_row(pk).filter(daemon_id__isnull=False, deadline__gt=Now())
    holder = Daemon.objects.filter(pk__in=live.values("daemon_id")).first()
    if holder is None:
        deadline = queue_row(pk).values_list("deadline", flat=True).first()
        ended = f" at {deadline.isoformat(timespec='milliseconds')}" if deadline else ""
        raise LeaseExpired(
            f"task #{pk}: the lease of attempt {attempt} expired{ended}; its {what} is "
            "refused (the task is leased again, or fails, once its restart is counted)",
            current=locked.status, target=target)
    return pk, holder


def _ended(pk, attempt, status, what, target):
    """Return the refusal of a write of ``attempt`` of task ``pk``, which is over: it
    ended as its lease expired (``LeaseExpired``), or an operator (or the consumer
    itself) ended it (``InvalidTransition``)."""
    ending = (LogRecord.objects.filter(instance_id=pk, attempt=attempt, status__isnull=False)
              .exclude(status__in=(Status.SCHEDULED, Status.RUNNING)).order_by("pk").first())
    if ending is not None and ending.message.startswith(EXPIRED.format(holder=ending.daemon)):
        return LeaseExpired(
            f"task #{pk}: the lease of attempt {attempt} expired; its {what} is refused "
            f"({ending.message}; the task is {status} now)", current=status, target=target)
    if target is not None:
        return refusal(pk, target)
    return InvalidTransition(f"task #{pk} is {status}: its lease is over and cannot be "
                             "extended", current=status)


def expire_leases(*, type_ids=None, batch_size=EXPIRE_BATCH_SIZE):
    """End up to ``batch_size`` pull leases past their deadline; return how many tasks
    were restarted (or FAILED, their ``max_restarts`` spent).

    An expired lease's task goes back to the queue spending a restart (a PAUSED one is
    held); the lease of a task an operator ended or re-enqueued meanwhile is let go
    of. Only ``type_ids``' leases when given. Each in a transaction of its own, the
    deadline read again under the task's lock: a lease extended meanwhile stays.
    """
    rows = Task.objects.filter(daemon__consumer__isnull=False).filter(
        Q(deadline__lt=Now()) | Q(deadline__isnull=True))
    if type_ids is not None:
        rows = rows.filter(type_id__in=type_ids)
    expired = list(rows.order_by("deadline").values_list("instance_id", "daemon_id")[:batch_size])
    return sum(_expire(pk, holder) for pk, holder in expired)


@queue_write
def _expire(pk, holder):
    locked = lock_task(pk)
    if locked.lease != holder:
        return False  # ended meanwhile, by another reaper or its consumer
    deadline = queue_row(pk).values_list("deadline", flat=True).get()
    if deadline is not None and not queue_row(pk).filter(deadline__lt=Now()).exists():
        return False  # extended meanwhile
    consumer = Daemon.objects.get(pk=holder)
    if locked.status not in IN_FLIGHT:
        release(pk, daemon=holder)  # an operator took it: let go, nothing to restart
        return False
    ended = f" at {deadline.isoformat(timespec='milliseconds')}" if deadline else ""
    restart(pk, EXPIRED.format(holder=consumer) + ended, attempt=locked.attempt,
            daemon=consumer)
    return True


def clean_lease(lease_seconds):
    """Return ``lease_seconds`` (a number or a timedelta) as a timedelta; raise ``InvalidParameter``."""
    lease = lease_seconds
    if isinstance(lease, (int, float)) and not isinstance(lease, bool):
        try:
            lease = datetime.timedelta(seconds=lease)
        except (OverflowError, ValueError):
            lease = None
    if (not isinstance(lease, datetime.timedelta)
            or not datetime.timedelta(0) < lease <= datetime.timedelta(seconds=LEASE_SECONDS_MAX)):
        raise InvalidParameter(f"lease_seconds must be a number of seconds above 0 and at most "
                               f"{LEASE_SECONDS_MAX} (a week), not {lease_seconds!r}")
    return lease


def clean_tag(tag):
    """Return ``tag`` if it is None or a tag a task may have; raise ``InvalidParameter``."""
    if tag is None:
        return None
    if not isinstance(tag, str) or not tag or len(tag) > TAG_MAX_LENGTH:
        raise InvalidParameter(
            f"a tag is a string of 1 to {TAG_MAX_LENGTH} characters, not {tag!r}")
    check_text(tag, "a tag")
    return tag


def _clean_consumer(name):
    if not isinstance(name, str) or not name.strip() or len(name) > CONSUMER_MAX_LENGTH:
        raise InvalidParameter(
            f"a consumer is named by a string of 1 to {CONSUMER_MAX_LENGTH} characters, not {name!r}")
    check_text(name, "a consumer's name")
    return name

