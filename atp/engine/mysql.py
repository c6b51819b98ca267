"""The verbs every task goes through (enqueue, claim, start, settle), as precompiled SQL on
MariaDB (10.6 and newer) and MySQL (8 and newer), InnoDB.

Neither has data-modifying common table expressions, and MySQL has no ``RETURNING``:
each verb is a few statements in one transaction. Concurrent daemons claim with row
locks, as on PostgreSQL: the queue rows with ``FOR UPDATE SKIP LOCKED`` down the claim
index, so two claims take different rows without waiting on each other, then the
tasks' rows ``FOR UPDATE``. What a statement would decide with ``CASE`` on PostgreSQL is
decided here in Python, on rows this transaction holds locked: the settle reads the
queue rows and the tasks it may end, locked, and writes only the attempts that still
hold their lease and may move so.

Locks are taken in the order of ``atp.engine.locks``: the daemon's row (shared, against
a reaper declaring it stopped), the limited types' rows (a claim within limits counts
their leases under that lock), the queue rows, then the tasks, each in ascending key
order. InnoDB rolls back one of two transactions that deadlock anyway; the ``MySQL``
database retries it (``atp.engine.databases``).

The statements are in ``atp/engine/statements/mysql.sql``, each named and whole; a list
is passed as one JSON parameter, so no statement is built for the number of items. Every
time a verb writes is one reading of the database's clock (``UTC_TIMESTAMP(6)``; Django
stores naive UTC on MySQL), so daemons on several hosts agree on deadlines.
"""

import collections
import datetime
import json
import math
import sys

from django.db import connections

from atp.conf import conf
from atp.engine import statements
from atp.engine.base import daemon_label, database
from atp.engine.batches import current_batch_id
from atp.engine.enqueue import INPUTS_BYTES_PER_INSERT
from atp.engine.notify import notify_runnable
from atp.engine.records import response_limit
from atp.engine.sql import (
    StatementsEngine,
    attach,
    build,
    builder,
    by_key,
    check_start,
    enqueue_one,
    row_values,
)
from atp.engine.transitions import refusal
from atp.exceptions import DaemonStopped
from atp.models import Inputs, Instance, Task, Type
from atp.rates import tokens_now
from atp.serialization import encode_response
from atp.states import Status, sources_of

#: The engine's statements, by name (``atp/engine/statements/mysql.sql``).
SQL = statements.load("mysql")

# The guards, from atp.states.TRANSITIONS.
CLAIMABLE = frozenset(sources_of(Status.SCHEDULED))
ENDS_FROM = {target: frozenset(sources_of(target)) for target in (Status.FINISHED, Status.FAILED)}
#: What a settle may ask of an attempt whose start is not written yet.
AFTER_START = (Status.RUNNING, Status.FINISHED, Status.FAILED)

#: Rows an INSERT of many writes per statement at most; and it carries at most
#: ``INPUTS_BYTES_PER_INSERT`` characters of inputs (more only for one row alone): in a
#: JSON array, a character takes at most 7 bytes as sent (a control character's
#: escape, its backslash escaped again), well within the server's ``max_allowed_packet``.
ROWS_PER_INSERT = 1000

ONE_MICROSECOND = datetime.timedelta(microseconds=1)


def _listed(values):
    """Return ``values`` as one parameter: a JSON array (read with ``JSON_TABLE`` or
    ``JSON_CONTAINS``)."""
    return json.dumps(list(values), ensure_ascii=False)


def _aware(value):
    """Return a naive UTC datetime of the database as an aware one."""
    return value.replace(tzinfo=datetime.UTC)


def _alive(cursor, daemon):
    """Lock ``daemon``'s row shared; return the database's time. Raise ``DaemonStopped``."""
    cursor.execute(SQL["alive"], [daemon.pk])
    row = cursor.fetchone()
    if row is None:
        raise DaemonStopped(f"daemon {daemon} was declared stopped; it claims nothing")
    return row[0]


def _now(cursor):
    cursor.execute(SQL["now"])
    return cursor.fetchone()[0]


def _types(cursor, type_ids):
    """Return ``{id: Type}`` of the unpaused, non-pull types among ``type_ids``, those with a
    limit read again under their rows' locks (in key order)."""
    cursor.execute(SQL["claimable_types"], [_listed(type_ids)])
    types = by_key(builder(Type), cursor.fetchall())
    limited = sorted(pk for pk, kind in types.items()
                     if kind.max_concurrency is not None or kind.rate is not None)
    if limited:
        cursor.execute(SQL["lock_limited"], [_listed(limited)])
        locked = by_key(builder(Type), cursor.fetchall())
        for pk in limited:  # paused or made a pull type meanwhile: not this round
            if pk in locked:
                types[pk] = locked[pk]
            else:
                del types[pk]
    return types


def _waiting(cursor, types, now, limit, buckets):
    """Return ``(key, type id)`` of up to ``limit`` runnable tasks of ``types`` in claim order,
    their queue rows locked: each type with a concurrency limit within its free slots
    (its limit less its leases, counted under its row's lock), each with a rate within
    the whole tokens of its bucket (``buckets``: type id -> tokens now). A walk of the
    index per limited type, one for the others."""
    limits = {pk: kind.max_concurrency for pk, kind in types.items()
              if kind.max_concurrency is not None}
    free = {pk: limit for pk in limits.keys() | buckets.keys()}
    if limits:
        cursor.execute(SQL["leases"], [_listed(limits)])
        leases = dict(cursor.fetchall())
        for pk, most in limits.items():
            free[pk] = min(free[pk], most - leases.get(pk, 0))
    for pk, tokens in buckets.items():
        free[pk] = min(free[pk], math.floor(tokens))
    walks = [([pk], slots) for pk, slots in free.items() if slots > 0]
    unlimited = [pk for pk in types if pk not in free]
    if unlimited:
        walks.insert(0, (unlimited, limit))
    rows = []
    for type_ids, most in walks:
        cursor.execute(SQL["waiting"], {"now": now, "types": _listed(type_ids), "limit": most})
        rows += cursor.fetchall()
    if len(walks) > 1:  # in claim order (rows past the limit stay locked till commit)
        rows.sort(key=lambda row: (-row[2], row[3], row[0]))
    return [(pk, type_id) for pk, type_id, _, _ in rows[:limit]]


def claim(daemon, limit, type_ids, start=0, inputs=False, *, now=None):
    """Lease and schedule up to ``limit`` runnable tasks of the types ``type_ids``, within
    their limits; return ``(instances, strays)``. The first ``start`` tasks in claim
    order are started too (RUNNING, after their SCHEDULED history entry); with
    ``inputs`` they come with their inputs. ``now``: the daemon's row is locked already
    (``settle_and_claim``), at that time. Run it in a transaction. Raise ``DaemonStopped``.
    """
    start = check_start(start)
    connection = connections[database()]
    type_ids = list(type_ids)
    with connection.cursor() as cursor:
        if now is None:
            now = _alive(cursor, daemon)
        if not type_ids:
            return [], []
        types = _types(cursor, type_ids)
        if not types:
            return [], []
        moment = _aware(now)
        buckets = {pk: tokens_now(kind.rate, kind.bucket_size, kind.tokens, kind.tokens_at, moment)
                   for pk, kind in types.items() if kind.rate is not None}
        picked = _waiting(cursor, types, now, limit, buckets)
        if not picked:
            return [], []
        keys = [pk for pk, _ in picked]
        claimed, strays = _lease(cursor, daemon, keys, types, now, start, inputs)
        if buckets:
            spent = collections.Counter(instance.type_id for instance in claimed)
            cursor.executemany(SQL["spend"], [(tokens - spent[pk], now, pk)
                                              for pk, tokens in buckets.items() if spent[pk]])
    return claimed, strays


def lease_keys(daemon, keys, type_ids, start=0, inputs=False):
    """Lease and schedule the waiting tasks ``keys`` (of the types ``type_ids``), their queue
    rows locked in this transaction by the claim that chose them (the gated claim:
    ``atp.engine.semaphores``); start the first ``start``; return ``(instances in the
    order of keys, strays)``."""
    with connections[database()].cursor() as cursor:
        types = _types(cursor, type_ids)
        return _lease(cursor, daemon, keys, types, _now(cursor), check_start(start), inputs)


def _lease(cursor, daemon, keys, types, now, start, inputs):
    """Lease the waiting tasks ``keys`` (of ``types``: ``{id: Type}``; their queue rows
    locked) to ``daemon`` at ``now`` (the database's time), starting the first ``start``;
    return ``(instances in the order of keys, the keys of those not claimable: strays)``."""
    moment = _aware(now)
    cursor.execute(SQL["lock_instances"], [_listed(sorted(keys))])
    found = by_key(builder(Instance), cursor.fetchall())
    claimed = [found[pk] for pk in keys if pk in found and found[pk].status in CLAIMABLE]
    strays = [pk for pk in keys if pk not in found or found[pk].status not in CLAIMABLE]
    # A type paused since the gated claim read it (``lease_keys``): its task waits on.
    claimed = [instance for instance in claimed if instance.type_id in types]
    if not claimed:
        return [], strays
    cursor.execute(SQL["schedule"], {"daemon": daemon.pk, "now": now, "rows": _listed(
        [instance.pk, int(index < start), types[instance.type_id].timeout // ONE_MICROSECOND]
        for index, instance in enumerate(claimed))})
    label = daemon_label(daemon)
    entries = []
    for index, instance in enumerate(claimed):
        attach(instance, type=types[instance.type_id])
        instance.attempt += 1
        instance.daemon_id = daemon.pk
        instance.updated = moment
        instance.status = Status.RUNNING if index < start else Status.SCHEDULED
        entries.append((instance.pk, now, Status.SCHEDULED, instance.attempt, "", label, ""))
        if instance.status == Status.RUNNING:
            instance.started = moment
            entries.append((instance.pk, now, Status.RUNNING, instance.attempt, "", label, ""))
    cursor.executemany(SQL["log_row"], entries)
    if inputs:
        cursor.execute(SQL["inputs_of_claimed"], [_listed(instance.pk for instance in claimed)])
        loaded = {row.instance_id: row for row in map(_inputs, cursor.fetchall())}
        for instance in claimed:
            attach(instance, inputs=loaded[instance.pk])
    return claimed, strays


def _inputs(row):
    return build(Inputs, row)


def next_due(type_ids, within):
    """Return in how many seconds the first task of ``type_ids`` waiting for its time
    becomes runnable, if within ``within`` seconds; else None (``postgresql.next_due``)."""
    type_ids = list(type_ids)
    if not type_ids:
        return None
    with connections[database()].cursor() as cursor:
        cursor.execute(SQL["next_due"], {"within": int(within * 1_000_000),
                                         "types": _listed(type_ids)})
        first, now = cursor.fetchone()
    if first is None:
        return None
    return max(0.0, (first - now).total_seconds())


def start(pk, attempt, daemon):
    """Move attempt ``attempt`` of task ``pk`` to RUNNING; return the task with its type and
    inputs. Run it in a transaction. Raise ``InvalidTransition`` (or
    ``AttemptSuperseded``) when it is not SCHEDULED on that attempt."""
    with connections[database()].cursor() as cursor:
        now = _now(cursor)
        cursor.execute(SQL["start"], {"now": now, "pk": pk, "attempt": attempt})
        if cursor.rowcount != 1:
            raise refusal(pk, Status.RUNNING, attempt=attempt)
        cursor.execute(SQL["log_row"], [pk, now, Status.RUNNING, attempt, "",
                                        daemon_label(daemon), ""])
        cursor.execute(SQL["instance_of"], [pk])
        instance = build(Instance, cursor.fetchone())
        cursor.execute(SQL["type_of"], [instance.type_id])
        instance.type = build(Type, cursor.fetchone())
        cursor.execute(SQL["inputs_of"], [pk])
        instance.inputs = build(Inputs, cursor.fetchone())
    return instance


def finish(pk, attempt, message, daemon, response, content_type):
    """Move attempt ``attempt`` of task ``pk`` to FINISHED with its response; return the attempt.

    Run it in a transaction. Raise ``InvalidResponse`` before writing for a response
    that cannot be stored, ``InvalidTransition`` (the caller's transaction then rolls
    back) when the task is not running on that attempt or holds no lease.
    """
    if response is not None:
        data, content_type, charset = encode_response(
            response, content_type, max_bytes=response_limit(pk))
    with connections[database()].cursor() as cursor:
        now = _now(cursor)
        cursor.execute(SQL["dequeue"], [pk])
        if cursor.rowcount == 1:
            cursor.execute(SQL["finish"], {"now": now, "pk": pk, "attempt": attempt})
        if cursor.rowcount != 1:
            raise refusal(pk, Status.FINISHED, attempt=attempt)
        cursor.execute(SQL["log_row"], [pk, now, Status.FINISHED, attempt, message,
                                        daemon_label(daemon), ""])
        if response is not None:
            cursor.execute(SQL["store"], [pk, data, content_type, charset, len(data), now])
    return attempt


def _stamp(value):
    """Return a naive datetime as text a ``DATETIME(6)`` column of ``JSON_TABLE`` reads."""
    return None if value is None else value.isoformat(" ", "microseconds")


def settle(daemon, outcomes, *, now=None):
    """Write the ends (FINISHED or FAILED ``Outcome``) and unwritten starts of many
    attempts; return the keys of the tasks written. Run it in a transaction. An outcome
    whose attempt was superseded, or whose task is not in a state to move so, or that
    holds no lease, writes nothing.

    The queue rows and the tasks are read locked first; what each outcome may write is
    decided on what they hold (the same guards as PostgreSQL's ``settle``).
    """
    outcomes = list(outcomes)
    if not outcomes:
        return set()
    pks = sorted({outcome.pk for outcome in outcomes})
    with connections[database()].cursor() as cursor:
        if now is None:
            now = _now(cursor)
        cursor.execute(SQL["lock_leased"], [_listed(pks)])
        held = dict(cursor.fetchall())
        if not held:
            return set()
        cursor.execute(SQL["lock_states"], [_listed(sorted(held))])
        prior = {pk: (status, attempt) for pk, status, attempt in cursor.fetchall()}
        label = daemon_label(daemon)
        # Per task (one outcome each, ``outcomes.one_per_task``) its state, start and end.
        writes, entries, dequeued, stored = {}, [], [], []
        for outcome in outcomes:
            pk, status = outcome.pk, outcome.status
            if pk not in prior:
                continue
            current, attempt = prior[pk]
            if attempt != outcome.attempt:
                continue
            began = None
            if (outcome.started_ago is not None and current == Status.SCHEDULED
                    and status in AFTER_START):
                # Its start is dated when it started, never before its claim.
                began = max(now - datetime.timedelta(seconds=outcome.started_ago), held[pk])
                entries.append((pk, began, Status.RUNNING, attempt, "", label, ""))
            elif status == Status.RUNNING or current not in ENDS_FROM.get(status, ()):
                continue
            ended = None if status == Status.RUNNING else now
            writes[pk] = [pk, str(status), _stamp(began), _stamp(ended)]
            if ended is not None:
                dequeued.append(pk)
                entries.append((pk, now, status, attempt, outcome.message, label, ""))
                if outcome.response is not None:
                    data, content_type, charset = outcome.response
                    stored.append((pk, data, content_type, charset, len(data), now))
        if writes:
            cursor.execute(SQL["write_ends"], {"rows": _listed(writes.values()), "now": now})
        if dequeued:
            cursor.execute(SQL["dequeue_ended"], [_listed(dequeued)])
        if entries:
            cursor.executemany(SQL["log_row"], entries)
        if stored:
            cursor.executemany(SQL["store"], stored)
    return set(writes)


def settle_and_claim(daemon, outcomes, limit, type_ids, start):
    """``settle`` then ``claim`` (starting ``start`` tasks, all with their inputs); return
    ``(keys of the tasks settled, what claim returns)``. Run it in a transaction: one
    commit for both (the claim counts the leases the settle ended). The daemon's row
    is locked first, as the claim alone locks it."""
    with connections[database()].cursor() as cursor:
        now = _alive(cursor, daemon)
    return (settle(daemon, outcomes, now=now),
            claim(daemon, limit, type_ids, start, inputs=True, now=now))


def enqueue_many(task_type, identifiers, data, priority, not_before, notify, tag=None,
                 named=False):
    """Write tasks of ``task_type`` (an identifier and encoded inputs each): instance, queue
    row, inputs and first history entry, a statement each for many tasks (up to
    ``ROWS_PER_INSERT`` and ``INPUTS_BYTES_PER_INSERT``) or for one alone; return
    ``(key, identifier, creation time)`` per task, or None when ``task_type`` changed
    since it was read. Run it in a transaction. Raise ``IntegrityError`` for a live
    duplicate.
    """
    connection = connections[database()]
    size = max((len(item.encode("utf-8")) for item in data), default=0)
    with connection.cursor() as cursor:
        cursor.execute(SQL["type_as_read"], {
            "type_id": task_type.pk, "type_identifier": task_type.identifier,
            "input_format": task_type.input_format, "max_input_bytes": conf.MAX_INPUT_BYTES,
            "size": size, "pull": task_type.pull, "named": named})
        row = cursor.fetchone()
        if row is None:
            return None
        now = row[0]
        moment = _aware(now)
        begins = (not_before if not isinstance(not_before, datetime.timedelta)
                  else moment + not_before)
        instance = row_values(Instance, connection, {
            "type_id": task_type.pk, "priority": priority, "created": moment,
            "updated": moment, "named": named, "batch_id": current_batch_id(), "tag": tag})
        task = row_values(Task, connection, {
            "type_id": task_type.pk, "priority": priority, "tag": tag, "enqueued": moment,
            "not_before": begins})
        if len(identifiers) == 1:  # VALUES: cheaper for one row than a JSON array's
            keys = [_insert_one(cursor, instance, task, task_type, identifiers[0], data[0], now)]
        else:
            keys = _insert_many(cursor, connection, instance, task, task_type, identifiers,
                                data, now)
    if notify:
        notify_runnable()
    return [(key, identifier, moment) for key, identifier in zip(keys, identifiers, strict=True)]


def _chunks(data):
    """Yield ``(begin, end)`` of runs of ``data`` of at most ``ROWS_PER_INSERT`` items and,
    but for an item alone, ``INPUTS_BYTES_PER_INSERT`` characters."""
    begin, size = 0, 0
    for index, item in enumerate(data):
        if index > begin and (index - begin == ROWS_PER_INSERT
                              or size + len(item) > INPUTS_BYTES_PER_INSERT):
            yield begin, index
            begin, size = index, 0
        size += len(item)
    if begin < len(data):
        yield begin, len(data)


def _insert_one(cursor, instance, task, task_type, identifier, data, now):
    """Write one task (instance, queue row, inputs, first history entry at ``now``) a
    row a statement; return its key."""
    cursor.execute(SQL["insert_instance"], {**instance, "identifier": identifier})
    key = cursor.lastrowid
    cursor.execute(SQL["insert_task"], {**task, "instance_id": key, "identifier": identifier})
    cursor.execute(SQL["insert_input"], {
        "instance_id": key, "input_format": task_type.input_format, "data": data})
    cursor.execute(SQL["log_row"], [key, now, Status.ACCEPTED, 0, "enqueued", "", ""])
    return key


def _insert_many(cursor, connection, instance, task, task_type, identifiers, data, now):
    """Write many tasks (instance, queue row, inputs, first history entry at ``now``), a
    statement per table for each run of ``_chunks``; return their keys in order."""
    returning = connection.features.can_return_rows_from_bulk_insert
    keys = []
    for begin, end in _chunks(data):
        names = identifiers[begin:end]
        chunk = (_insert_instances(cursor, instance, names) if returning
                 else _insert_each_instance(cursor, instance, names))
        cursor.execute(SQL["insert_tasks"], {
            **task, "rows": _listed(zip(chunk, names, strict=True))})
        cursor.execute(SQL["insert_inputs"], {
            "input_format": task_type.input_format,
            "rows": _listed(zip(chunk, data[begin:end], strict=True))})
        cursor.execute(SQL["insert_accepted"], {"time": now, "keys": _listed(chunk)})
        keys += chunk
    return keys


def _insert_instances(cursor, instance, identifiers):
    """Insert one instance per identifier (unique in the batch), the values of
    ``instance`` otherwise, in one statement; return their keys in order (MariaDB)."""
    cursor.execute(SQL["insert_instances"], {**instance, "identifiers": _listed(identifiers)})
    found = dict((identifier, key) for key, identifier in cursor.fetchall())
    return [found[identifier] for identifier in identifiers]


def _insert_each_instance(cursor, instance, identifiers):
    """``_insert_instances`` a statement per instance, each key read from the driver
    (MySQL, which has no ``RETURNING``)."""
    keys = []
    for identifier in identifiers:
        cursor.execute(SQL["insert_instance"], {**instance, "identifier": identifier})
        keys.append(cursor.lastrowid)
    return keys


def enqueue(task_type, instance, data, not_before, size, notify):
    """Write one task (``enqueue_many`` of one, ``sql.enqueue_one``)."""
    return enqueue_one(enqueue_many, task_type, instance, data, not_before, notify)


class MySQLEngine(StatementsEngine):
    """Each verb a few statements written once (``mysql.sql``), in one transaction, with
    row locks: claims skip each other's rows (``SKIP LOCKED``)."""

    name = "mysql"
    verbs = sys.modules[__name__]
