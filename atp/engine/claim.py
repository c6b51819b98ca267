"""Claiming queued tasks for a daemon: the one place two consumers could collide.

PostgreSQL (and MySQL/MariaDB) lock the claimed queue rows with ``FOR UPDATE SKIP
LOCKED``: concurrent daemons each take different rows without waiting on each other.
SQLite has no row locks; the claim runs in an immediate transaction, so claims are
serialised by the database's single write lock. On every database the writes are
also guarded (only waiting rows, only ACCEPTED tasks), so a claim that finds a row
taken under it rolls back instead of taking the task twice.
"""

import logging

from django.db import connections
from django.db.models import Count, F
from django.db.models.functions import Now

from atp.engine import hotpath
from atp.engine.base import daemon_label, database, pk_of, queue_write
from atp.exceptions import AtpError, InvalidParameter, TaskTypeNotFound
from atp.models import Daemon, Instance, LogRecord, Task, Type
from atp.states import IN_FLIGHT, Status

logger = logging.getLogger(__name__)

#: Claim order; ``atp_task_claim_idx`` has these columns in this order.
CLAIM_ORDER = ("-priority", "not_before", "instance_id")


class ClaimConflict(AtpError):
    """A claimed queue row did not match its task; the claim was rolled back."""


def dequeue(daemon, limit=1, *, types=None):
    """Claim up to ``limit`` runnable tasks for ``daemon``; return them SCHEDULED.

    Tasks are taken by priority, then by how long they have been runnable, skipping
    paused types, types at their ``max_concurrency``, tasks whose ``eta`` has not
    come, and types outside ``types`` (a list of identifiers) when given. Each claimed
    task starts a new attempt leased to ``daemon``. Raise ``InvalidParameter`` or
    ``TaskTypeNotFound``.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidParameter(f"limit must be a positive integer, not {limit!r}")
    if not isinstance(daemon, Daemon):
        daemon = Daemon.objects.filter(pk=pk_of(daemon)).first()
        if daemon is None:
            raise InvalidParameter("no such daemon: register it with register_daemon() first")
    limits = claimable_types(types)
    if not limits:
        return []
    return _claim(daemon, limit, limits)


def claimable_types(types=None):
    """Return ``{type id: max_concurrency}`` of unpaused types, among ``types`` when given."""
    rows = Type.objects.filter(is_paused=False)
    if types is not None:
        types = list(types)
        known = set(Type.objects.filter(identifier__in=types).values_list("identifier", flat=True))
        unknown = sorted(set(types) - known)
        if unknown:
            raise TaskTypeNotFound(f"no task type {', '.join(map(repr, unknown))} is registered")
        rows = rows.filter(identifier__in=types)
    return dict(rows.values_list("pk", "max_concurrency"))


def runnable_tasks(type_ids):
    """Return the queue rows a claim may take, in claim order, locked as it reads them."""
    waiting = Task.objects.filter(daemon__isnull=True, not_before__lte=Now())
    waiting = waiting.filter(type_id__in=type_ids).order_by(*CLAIM_ORDER)
    if connections[database()].features.has_select_for_update_skip_locked:
        waiting = waiting.select_for_update(skip_locked=True)
    return waiting


def _free_slots(limits):
    """Return how many more tasks each type with a concurrency limit may have in flight."""
    limited = [type_id for type_id, limit in limits.items() if limit is not None]
    if not limited:
        return {}
    # Locking the limited types' rows serialises the claims of those types across
    # daemons, so two daemons cannot both count the last free slot.
    list(Type.objects.select_for_update().filter(pk__in=limited).values_list("pk"))
    in_flight = dict(
        Instance.objects.filter(type_id__in=limited, status__in=IN_FLIGHT)
        .values("type_id").annotate(count=Count("pk")).values_list("type_id", "count")
    )
    return {type_id: limits[type_id] - in_flight.get(type_id, 0) for type_id in limited}


def _take(limit, limits):
    """Return the keys of up to ``limit`` runnable tasks, in claim order, within limits."""
    free = _free_slots(limits)
    eligible = {type_id for type_id in limits if free.get(type_id, 1) > 0}
    taken = []
    while eligible and len(taken) < limit:
        wanted = limit - len(taken)
        rows = list(
            runnable_tasks(eligible).exclude(instance_id__in=taken)
            .values_list("instance_id", "type_id")[:wanted]
        )
        for pk, type_id in rows:
            if type_id in free:
                if free[type_id] <= 0:
                    continue  # its type filled up earlier in this batch
                free[type_id] -= 1
                if free[type_id] == 0:
                    eligible.discard(type_id)
            taken.append(pk)
        if len(rows) < wanted:
            break
    return taken


@queue_write
def _claim(daemon, limit, limits):
    if hotpath.is_available() and all(limit is None for limit in limits.values()):
        leased, instances = hotpath.claim(daemon, limit, limits)
        if leased != len(instances):
            logger.error("claim rolled back: %s leased, %s scheduled", leased, len(instances))
            raise ClaimConflict()
        return instances
    pks = _take(limit, limits)
    if not pks:
        return []
    leased = Task.objects.filter(instance_id__in=pks, daemon__isnull=True).update(
        daemon=daemon, claimed=Now()
    )
    scheduled = Instance.objects.filter(pk__in=pks, status=Status.ACCEPTED).update(
        status=Status.SCHEDULED, attempt=F("attempt") + 1, daemon=daemon, updated=Now()
    )
    if leased != len(pks) or scheduled != len(pks):
        logger.error("claim of %s rolled back: %s leased, %s scheduled", pks, leased, scheduled)
        raise ClaimConflict()
    position = {pk: index for index, pk in enumerate(pks)}
    instances = sorted(
        Instance.objects.filter(pk__in=pks).select_related("type"),
        key=lambda instance: position[instance.pk],
    )
    label = daemon_label(daemon)
    LogRecord.objects.bulk_create(
        LogRecord(instance=instance, time=Now(), status=Status.SCHEDULED,
                  attempt=instance.attempt, daemon=label)
        for instance in instances
    )
    return instances
