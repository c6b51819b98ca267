"""Claiming queued tasks for a daemon: the one place two consumers could collide.

PostgreSQL (and MySQL/MariaDB) lock the claimed queue rows with ``FOR UPDATE SKIP
LOCKED``: concurrent daemons each take different rows without waiting on each other.
SQLite has no row locks; the claim runs in an immediate transaction, so claims are
serialised by the database's single write lock.

A claim first locks its daemon's registry row and refuses a daemon declared stopped
(``DaemonStopped``): a reaper declaring it stopped waits for the claim to commit and
then restarts what it took, or the claim waits for the reaper and takes nothing.
A queue row that does not match its task (see ``atp.invariants``) is repaired and
skipped, never allowed to fail the whole batch.
"""

import datetime
import logging

from django.db import connections
from django.db.models import DateTimeField, ExpressionWrapper, F, OuterRef, Q, Subquery, Value
from django.db.models.functions import Now

from atp import registry
from atp.conf import conf
from atp.db import database_now
from atp.engine.base import daemon_label, database, pk_of, queue_write
from atp.engine.databases import database_of
from atp.engine.engines import engine
from atp.engine.locks import for_update, lock_task
from atp.engine.outcomes import one_per_task
from atp.engine.semaphores import claim_gated, due_at, gated_types
from atp.engine.semaphores import next_due as gated_next_due
from atp.engine.sql import CLAIM_INDEX, CLAIM_ORDER, GATED_ORDER, check_start
from atp.engine.transitions import move, write_history
from atp.exceptions import InvalidParameter, TaskTypeNotFound
from atp.models import Daemon, Instance, LogRecord, Task, Type
from atp.rates import seconds_to_token, tokens_now
from atp.states import IN_FLIGHT, TERMINAL, Status

logger = logging.getLogger(__name__)



def dequeue(daemon, limit=1, *, types=None):
    """Claim up to ``limit`` runnable tasks for ``daemon``; return them SCHEDULED.

    Tasks are taken by priority, then by how long they have been runnable, skipping
    paused types, types at their ``max_concurrency``, tasks whose ``eta`` has not
    come, expired tasks (``expires``), held tasks, tasks whose semaphores are full, and
    types outside ``types`` (a list of identifiers) when given. The tasks of gated types
    (``atp.engine.semaphores``) come after the others. Each claimed task starts a new
    attempt leased to ``daemon``, and its time-out clock starts. Raise
    ``InvalidParameter``, ``TaskTypeNotFound`` or ``DaemonStopped``.
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
    claimed = _claim(daemon, limit, list(limits), limited=any(limits.values()))
    return claimed + _claim_gated(daemon, limit - len(claimed), gated_types(list(limits)))


def claim_for_daemon(daemon, limit, type_ids, *, start=0, limited=False, gated=(),
                     gated_first=False):
    """Claim up to ``limit`` runnable tasks of the types ``type_ids`` for ``daemon``; return
    them in claim order, with their inputs.

    The daemon's own claim: its types are the ones it has loaded, read by id, so no
    identifier needs checking. The engine checks which are paused or limited in the
    same round trip as the claim. The first ``start`` tasks are also started (RUNNING)
    in the same transaction: the supervisor claims so for its idle workers, and the
    rest (prefetched, SCHEDULED) for its workers' queues. ``limited`` says a type among
    them was last seen with a concurrency limit (the PostgreSQL engine then claims
    within limits at once). ``gated``: the types among them whose tasks may hold
    semaphores, as last seen: claimed after the others, their semaphores counted
    (``atp.engine.semaphores``; the engines' claims take none of their tasks), or before
    them with ``gated_first`` (a daemon takes turns: neither claim starves the other).
    Raise ``DaemonStopped``.
    """
    start = check_start(start)
    first = _claim_gated(daemon, limit, gated, start=start, inputs=True) if gated_first else []
    start = max(0, start - len(first))
    claimed = first + (_claim(daemon, limit - len(first), list(type_ids), start=start,
                              inputs=True, limited=limited) if limit > len(first) else [])
    if gated_first:
        return claimed
    return claimed + _claim_gated(daemon, limit - len(claimed), gated,
                                  start=max(0, start - len(claimed)), inputs=True)


def settle_and_claim(daemon, outcomes, limit, type_ids, *, start, limited=False, gated=(),
                     gated_first=False):
    """Write ``outcomes`` (the ends and unwritten starts of attempts ``daemon``'s workers
    reported, see ``lifecycle.settle``) and claim up to ``limit`` tasks of ``type_ids``
    for its workers, starting the first ``start``, in one transaction (one statement on
    PostgreSQL, after a lock of the limited types with ``limited``, see
    ``claim_for_daemon``; the ``gated`` types' tasks in a claim of their own after it);
    return ``(keys of the tasks settled, tasks claimed)``. Raise ``DaemonStopped``:
    nothing was claimed then, and the outcomes may or may not have been written.
    """
    start = check_start(start)
    outcomes = one_per_task(outcomes)
    if gated_first and gated:
        # The ends first, on their own: the slots they free are the gated claim's to take.
        settled = engine().settle(daemon, outcomes) if outcomes else set()
        return settled, claim_for_daemon(daemon, limit, type_ids, start=start,
                                         limited=limited, gated=gated, gated_first=True)
    settled, (instances, strays) = engine().settle_and_claim(
        daemon, outcomes, limit, list(type_ids), start=start, limited=limited)
    if strays:
        _repair_strays(strays)
    return settled, instances + _claim_gated(daemon, limit - len(instances), gated,
                                             start=max(0, start - len(instances)), inputs=True)


def _claim_gated(daemon, limit, gated, *, start=0, inputs=False):
    """Claim up to ``limit`` tasks of the ``gated`` types (``atp.engine.semaphores``)."""
    if limit < 1 or not gated:
        return []
    return claim_gated(daemon, limit, list(gated), start=start, inputs=inputs)


def next_due(type_ids, within, *, rates=False, claimed_ago=0.0, gated=()):
    """Return in how many seconds the first task of ``type_ids`` waiting for its time
    (an ``eta``, a ``countdown``, a retry's backoff) becomes runnable, if it does within
    ``within`` seconds, else None: an idle daemon sleeps until then rather than until
    its next poll. Unleased, unpaused tasks only; paused types are left to the claim.
    With ``rates`` (a type among them has a ``rate``), also when the bucket of a type
    with runnable tasks that was empty at the daemon's last claim, ``claimed_ago``
    seconds ago, holds a token again: 0 when it already does. With ``gated`` (the types
    among them whose tasks may hold semaphores), their gated tasks too."""
    type_ids = list(type_ids)
    if not type_ids:
        return None
    due = engine().next_due(type_ids, within)
    if gated:
        first = gated_next_due(list(gated), within)
        if first is not None:
            due = first if due is None else min(due, first)
    if rates:
        token = _next_token(type_ids, claimed_ago)
        if token is not None and token < within:
            due = token if due is None else min(due, token)
    return due


def _next_token(type_ids, claimed_ago):
    """Return in how many seconds the first bucket of ``type_ids``'s rate-limited types that
    was empty ``claimed_ago`` seconds ago, at the last claim, while tasks of its type are
    runnable holds a token again (0: it does already; None: none such).

    As of the claim, not of now: a bucket the claim found empty held its tasks back,
    however late the daemon asks (under load, after the token came); one that held a
    token did not (a concurrency limit did), and waiting for it would claim in vain."""
    buckets = list(Type.objects.filter(pk__in=type_ids, is_paused=False, rate__isnull=False)
                   .values_list("pk", "rate", "bucket_size", "tokens", "tokens_at"))
    if not buckets:
        return None
    claimed_at = database_now(database()) - datetime.timedelta(seconds=claimed_ago)
    waits = {}
    for type_id, rate, size, tokens, tokens_at in buckets:
        tokens = tokens_now(rate, size, tokens, tokens_at, claimed_at)
        if tokens < 1:
            waits[type_id] = max(0.0, seconds_to_token(rate, tokens) - claimed_ago)
    # One probe per empty bucket, stopping at its first runnable task (the type's rows
    # are read through the unique (type, identifier) index).
    runnable = [type_id for type_id in waits if Task.objects.filter(
        type_id=type_id, daemon__isnull=True, paused_since__isnull=True,
        not_before__lte=Now()).exists()]
    return min((waits[type_id] for type_id in runnable), default=None)


def claimable_types(types=None):
    """Return ``{type id: whether it is limited}`` of unpaused types a daemon runs (not pull
    types), among ``types`` when given (limited: it has a ``max_concurrency`` or a
    ``rate``). Raise ``TaskTypeNotFound``, or ``InvalidParameter`` for a pull type."""
    rows = Type.objects.filter(is_paused=False, pull=False)
    if types is not None:
        types = [registry.clean_type_identifier(identifier) for identifier in types]
        known = dict(Type.objects.filter(identifier__in=types).values_list("identifier", "pull"))
        unknown = sorted(set(types) - known.keys())
        if unknown:
            raise TaskTypeNotFound(f"no task type {', '.join(map(repr, unknown))} is registered")
        pulled = sorted(identifier for identifier, pull in known.items() if pull)
        if pulled:
            raise InvalidParameter(f"task type {', '.join(map(repr, pulled))} is a pull type: "
                                   "lease its tasks with lease_tasks()")
        rows = rows.filter(identifier__in=types)
    return limits_of(rows)


def limits_of(types):
    """Return ``{type id: whether it is limited}`` of the ``Type`` rows ``types``."""
    return {pk: most is not None or rate is not None
            for pk, most, rate in types.values_list("pk", "max_concurrency", "rate")}


def runnable_rows():
    """Return the queue rows runnable now: unleased, not held, due, not expired."""
    return Task.objects.filter(
        daemon__isnull=True, paused_since__isnull=True, not_before__lte=Now(),
    ).filter(Q(expires__isnull=True) | Q(expires__gt=Now()))


def runnable_tasks(type_ids, *, gated=False, locked=True):
    """Return the queue rows of ``type_ids`` a claim may take (``runnable_rows``), in
    claim order, locked as it reads them (skipping those locked already) unless not
    ``locked``: the rows that hold no semaphore, or with ``gated`` those that do, in
    their own order (``GATED_ORDER``: ``atp.engine.semaphores`` counts their slots)."""
    waiting = runnable_rows().filter(type_id__in=type_ids)
    # A gated row has a turn, an ungated one none: which claim index holds it.
    if gated:
        waiting = waiting.filter(gated=True, turn__isnull=False).order_by(*GATED_ORDER)
    else:
        waiting = waiting.filter(gated=False)
        waiting = waiting.filter(turn__isnull=True).order_by(*CLAIM_ORDER)
    if locked and connections[database()].features.has_select_for_update_skip_locked:
        waiting = waiting.select_for_update(skip_locked=True)
    return waiting


def read_runnable(rows, fields, limit, *, index=CLAIM_INDEX):
    """Return ``fields`` of up to ``limit`` of the queue rows ``rows`` (``runnable_tasks``,
    filtered further), read down the claim index (``index``: the gated rows') in claim
    order and locked as read.

    The walk down the index is forced (``Database.force_claim_index``): with missing or
    stale statistics a planner would rather sort every waiting row, and a database that
    locks the rows it reads before sorting them (InnoDB) would then lock them all.
    """
    connection = connections[database()]
    with connection.cursor() as cursor:
        sql, params = claim_index_statement(rows.values_list(*fields)[:limit], cursor, index)
        cursor.execute(sql, params)
        return cursor.fetchall()


def claim_index_statement(rows, cursor, index=CLAIM_INDEX):
    """Return the SQL and parameters of the queryset ``rows`` of the queue table, made to
    walk ``index``, to run on ``cursor`` in this transaction."""
    connection = connections[database()]
    sql, params = rows.query.sql_with_params()
    table = connection.ops.quote_name(Task._meta.db_table)
    return database_of(connection).force_claim_index(cursor, sql, table, index), params


def _claim(daemon, limit, type_ids, *, start=0, inputs=False, limited=False):
    """Claim with the engine, then repair the stray rows it found; return the tasks."""
    instances, strays = engine().claim(daemon, limit, type_ids, start=start, inputs=inputs,
                                       limited=limited)
    if strays:
        _repair_strays(strays)
    return instances


@queue_write
def _repair_strays(pks):
    """Repair the stray rows a claim found, each locked again and seen still stray: the
    claim that found them has committed."""
    for pk in pks:
        locked = lock_task(pk)
        if locked.has_row and not locked.is_leased and locked.status != Status.ACCEPTED:
            repair_stray_row(pk)


def lease_rows(daemon, pks, *, lease=None, message=""):
    """Lease the waiting queue rows ``pks`` (locked by the caller, in claim order) to
    ``daemon``: each ACCEPTED task starts a new attempt, SCHEDULED, its lease running
    out after its type's ``timeout``, or after ``lease`` (a timedelta: a pull lease).
    Return ``(instances in claim order, keys of stray rows)``; ``message`` goes to the
    history entry of each."""
    states = dict(for_update(Instance.objects.filter(pk__in=pks)).values_list("pk", "status"))
    good = [pk for pk in pks if states.get(pk) == Status.ACCEPTED]
    strays = [pk for pk in pks if states.get(pk) != Status.ACCEPTED]
    if not good:
        return [], strays
    # One moment for the claim and its history entries, as every engine dates them: a
    # start is never dated before it (``lifecycle.start_attempt``).
    now = database_now(database())
    if lease is None:
        timeout = Subquery(Type.objects.filter(pk=OuterRef("type_id")).values("timeout")[:1])
        deadline = ExpressionWrapper(Value(now) + timeout, output_field=DateTimeField())
    else:
        deadline = now + lease
    Task.objects.filter(instance_id__in=good).update(daemon=daemon, claimed=now, deadline=deadline)
    Instance.objects.filter(pk__in=good).update(
        status=Status.SCHEDULED, attempt=F("attempt") + 1, daemon=daemon, updated=now
    )
    position = {pk: index for index, pk in enumerate(good)}
    instances = sorted(
        Instance.objects.filter(pk__in=good).select_related("type"),
        key=lambda instance: position[instance.pk],
    )
    label = daemon_label(daemon)
    LogRecord.objects.bulk_create(
        LogRecord(instance=instance, time=now, status=Status.SCHEDULED,
                  attempt=instance.attempt, daemon=label, message=message)
        for instance in instances
    )
    return instances, strays


def repair_stray_row(pk):
    """Mend the waiting queue row of task ``pk`` whose task is not ACCEPTED.

    Call it with the row locked, inside the claim. An ended task's row is deleted; an
    in-flight task that lost its lease goes back to the queue, claimable once any
    worker still running it has surely been stopped (its daemon sees the lease gone).
    """
    status = for_update(Instance.objects.filter(pk=pk)).values_list("status", flat=True).first()
    if status in TERMINAL:
        Task.objects.filter(instance_id=pk).delete()
        _note(pk, f"the queue found this {status} task still waiting and removed its stray "
                  "queue row")
    elif status in IN_FLIGHT:
        delay = datetime.timedelta(seconds=conf.DAEMON_TIMEOUT_SECONDS)
        Task.objects.filter(instance_id=pk).update(**due_at(Now() + delay))
        move(pk, Status.ACCEPTED, sources=set(IN_FLIGHT), changes={"started": None},
             message=f"the queue found this {status} task held by no daemon: back in the "
                     f"queue in {delay.total_seconds():g} s, once any worker still running "
                     "it has been stopped")
    logger.warning("task id=%s status=%s had a waiting queue row; repaired", pk, status)


def _note(pk, message):
    attempt = Instance.objects.filter(pk=pk).values_list("attempt", flat=True).get()
    write_history(pk, None, attempt, message)
