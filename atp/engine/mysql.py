"""The verbs every task goes through (enqueue, claim, start, settle), as precompiled SQL on
MariaDB (10.6 and newer) and MySQL (8 and newer), InnoDB.

Neither has data-modifying common table expressions, and MySQL has no ``RETURNING``:
each verb is a few statements in one transaction, their text built once per shape.
Concurrent daemons claim with row locks, as on PostgreSQL: the queue rows with ``FOR
UPDATE SKIP LOCKED`` down the claim index, so two claims take different rows without
waiting on each other, then the tasks' rows ``FOR UPDATE``. What a statement would
decide with ``CASE`` on PostgreSQL is decided here in Python, on rows this
transaction holds locked: the settle reads the queue rows and the tasks it may end,
locked, and writes only the attempts that still hold their lease and may move so.

Locks are taken in the order of ``atp.engine.locks``: the daemon's row (shared, against
a reaper declaring it stopped), the limited types' rows (a claim within limits counts
their leases under that lock), the queue rows, then the tasks. InnoDB rolls back one of
two transactions that deadlock anyway; the ``MySQL`` database retries it
(``atp.engine.databases``).

Every time a verb writes is one reading of the database's clock (``UTC_TIMESTAMP(6)``;
Django stores naive UTC on MySQL), so daemons on several hosts agree on deadlines.
"""

import collections
import datetime
import math
import sys

from django.db import connections

from atp.engine import sql
from atp.engine.base import daemon_label, database
from atp.engine.batches import current_batch_id
from atp.engine.enqueue import INPUTS_BYTES_PER_INSERT
from atp.engine.notify import notify_runnable
from atp.engine.records import response_limit
from atp.engine.sql import (
    CLAIM_INDEX,
    CLAIM_ORDER_SQL,
    INPUTS,
    INSTANCE,
    LOG_COLUMNS,
    RESPONSE,
    TASK,
    TYPE,
    StatementsEngine,
    build,
    check_start,
    columns,
    enqueue_one,
    one_of,
    row_values,
    stored_fields,
    type_as_read,
)
from atp.engine.transitions import refusal
from atp.exceptions import DaemonStopped
from atp.models import Daemon, Inputs, Instance, LogRecord, Task, Type
from atp.rates import tokens_now
from atp.serialization import encode_response
from atp.states import Status, sources_of

DAEMON = Daemon._meta.db_table

# The guards, from atp.states.TRANSITIONS.
CLAIMABLE = frozenset(sources_of(Status.SCHEDULED))
ENDS_FROM = {target: frozenset(sources_of(target)) for target in (Status.FINISHED, Status.FAILED)}
#: What a settle may ask of an attempt whose start is not written yet.
AFTER_START = (Status.RUNNING, Status.FINISHED, Status.FAILED)

#: Rows an INSERT of many writes per statement at most; and it carries at most
#: ``INPUTS_BYTES_PER_INSERT`` of text (more only for one row alone), well within the
#: server's ``max_allowed_packet``.
ROWS_PER_INSERT = 1000


def _in(name, values):
    """Return ``name IN (%s, ...)`` with a placeholder per value."""
    return f"{name} IN ({', '.join(['%s'] * len(values))})"


def _aware(value):
    """Return a naive UTC datetime of the database as an aware one."""
    return value.replace(tzinfo=datetime.UTC)


#: The clock, and the daemon's row locked shared while it is not declared stopped (a
#: reaper's FOR UPDATE waits for this transaction, or this one for the reaper).
NOW = "SELECT UTC_TIMESTAMP(6)"
ALIVE = (f"SELECT UTC_TIMESTAMP(6) FROM {DAEMON} WHERE id = %s AND stopped IS NULL "
         "LOCK IN SHARE MODE")
# Never a pull type: its tasks are leased by consumers (atp.engine.pull), not daemons.
TYPE_COLUMNS = columns(Type, TYPE)
LEASES = f"SELECT type_id, count(*) FROM {TASK} WHERE daemon_id IS NOT NULL AND "
#: A type's bucket after a claim took tokens from it (``atp.rates``).
SPEND = f"UPDATE {TYPE} SET tokens = %s, tokens_at = %s WHERE id = %s"
INSTANCE_COLUMNS = columns(Instance, INSTANCE)
#: A history entry (its actor, last, is empty: a daemon's). Only placeholders between
#: the parentheses: the driver's ``executemany`` then sends all rows in one INSERT
#: (a literal there made it send one INSERT per row).
LOG_ROW = f"{LOG_COLUMNS} VALUES (%s, %s, %s, %s, %s, %s, %s)"
STORE = (
    f"INSERT INTO {RESPONSE} "
    "(instance_id, data, content_type, charset, size, stored) VALUES (%s, %s, %s, %s, %s, %s) "
    "ON DUPLICATE KEY UPDATE data = VALUES(data), content_type = VALUES(content_type), "
    "charset = VALUES(charset), size = VALUES(size), stored = VALUES(stored)"
)


def _alive(cursor, daemon):
    """Lock ``daemon``'s row shared; return the database's time. Raise ``DaemonStopped``."""
    cursor.execute(ALIVE, [daemon.pk])
    row = cursor.fetchone()
    if row is None:
        raise DaemonStopped(f"daemon {daemon} was declared stopped; it claims nothing")
    return row[0]


def _now(cursor):
    cursor.execute(NOW)
    return cursor.fetchone()[0]


def _types(cursor, type_ids):
    """Return ``{id: Type}`` of the unpaused, non-pull types among ``type_ids``, those with a
    limit read again under their rows' locks (in key order)."""
    cursor.execute(f"SELECT {TYPE_COLUMNS} FROM {TYPE} WHERE is_paused = 0 AND pull = 0 AND "
                   + _in("id", type_ids), type_ids)
    types = {row[0]: build(Type, row) for row in cursor.fetchall()}
    limited = sorted(pk for pk, kind in types.items()
                     if kind.max_concurrency is not None or kind.rate is not None)
    if limited:
        cursor.execute(f"SELECT {TYPE_COLUMNS} FROM {TYPE} WHERE is_paused = 0 AND pull = 0 AND "
                       + _in("id", limited) + " ORDER BY id FOR UPDATE", limited)
        locked = {row[0]: build(Type, row) for row in cursor.fetchall()}
        for pk in limited:  # paused or made a pull type meanwhile: not this round
            if pk in locked:
                types[pk] = locked[pk]
            else:
                del types[pk]
    return types


def _waiting_statement(type_count):
    """Lock and select the runnable tasks of ``type_count`` types in claim order, walking
    the claim index and skipping the rows other claims hold; parameters: the moment,
    the types, the limit."""
    return (
        f"SELECT instance_id, type_id, priority, not_before FROM {TASK} "
        f"FORCE INDEX ({CLAIM_INDEX}) "
        "WHERE daemon_id IS NULL AND paused_since IS NULL AND not_before <= %s "
        f"AND {_in('type_id', range(type_count))} {CLAIM_ORDER_SQL} LIMIT %s "
        "FOR UPDATE SKIP LOCKED"
    )


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
        cursor.execute(LEASES + _in("type_id", limits) + " GROUP BY type_id", list(limits))
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
        cursor.execute(_waiting_statement(len(type_ids)), [now, *type_ids, most])
        rows += cursor.fetchall()
    if len(walks) > 1:  # in claim order (rows past the limit stay locked till commit)
        rows.sort(key=lambda row: (-row[2], row[3], row[0]))
    return [(pk, type_id) for pk, type_id, _, _ in rows[:limit]]


def _lease_statement(type_count, count):
    """Lease the queue rows of one claim to its daemon; parameters: the daemon, the moment,
    per type its id and its tasks' deadline, then the keys."""
    deadlines = " ".join(["WHEN %s THEN %s"] * type_count)
    return (f"UPDATE {TASK} SET daemon_id = %s, claimed = %s, "
            f"deadline = CASE type_id {deadlines} END WHERE {_in('instance_id', range(count))}")


def _schedule_statement(count, start):
    """Schedule ``count`` tasks, the first ``start`` of which are started too;
    parameters: the keys to start, the daemon, the moment, the keys to start, the
    moment, the keys."""
    started = _in("id", range(start)) if start else "FALSE"
    return (
        f"UPDATE {INSTANCE} SET status = CASE WHEN {started} THEN '{Status.RUNNING}' "
        f"ELSE '{Status.SCHEDULED}' END, attempt = attempt + 1, daemon_id = %s, updated = %s, "
        f"started = CASE WHEN {started} THEN %s ELSE started END "
        f"WHERE {_in('id', range(count))}"
    )


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
        cursor.execute(f"SELECT {INSTANCE_COLUMNS} FROM {INSTANCE} WHERE {_in('id', keys)} "
                       "ORDER BY id FOR UPDATE", keys)
        found = {row[0]: build(Instance, row) for row in cursor.fetchall()}
        claimed = [found[pk] for pk in keys if pk in found and found[pk].status in CLAIMABLE]
        strays = [pk for pk in keys if pk not in found or found[pk].status not in CLAIMABLE]
        if not claimed:
            return [], strays
        pks = [instance.pk for instance in claimed]
        starting = pks[:start]
        cursor.execute(_schedule_statement(len(pks), len(starting)),
                       [*starting, daemon.pk, now, *starting, now, *pks])
        kinds = sorted({instance.type_id for instance in claimed})
        cursor.execute(_lease_statement(len(kinds), len(pks)), [
            daemon.pk, now, *(value for pk in kinds for value in (pk, now + types[pk].timeout)),
            *pks])
        label = daemon_label(daemon)
        entries = []
        for index, instance in enumerate(claimed):
            instance.type = types[instance.type_id]
            instance.attempt += 1
            instance.daemon_id = daemon.pk
            instance.updated = moment
            instance.status = Status.RUNNING if index < len(starting) else Status.SCHEDULED
            entries.append((instance.pk, now, Status.SCHEDULED, instance.attempt, "", label, ""))
            if instance.status == Status.RUNNING:
                instance.started = moment
                entries.append((instance.pk, now, Status.RUNNING, instance.attempt, "", label, ""))
        cursor.executemany(LOG_ROW, entries)
        if inputs:
            cursor.execute(f"SELECT {columns(Inputs, INPUTS)} FROM {INPUTS} "
                           f"WHERE {_in('instance_id', pks)}", pks)
            loaded = {row.instance_id: row for row in map(_inputs, cursor.fetchall())}
            for instance in claimed:
                instance.inputs = loaded[instance.pk]
        if buckets:
            spent = collections.Counter(instance.type_id for instance in claimed)
            for pk, tokens in buckets.items():
                if spent[pk]:  # a bucket none was taken from stays as it is
                    cursor.execute(SPEND, [tokens - spent[pk], now, pk])
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
        cursor.execute(
            f"SELECT MIN(not_before), UTC_TIMESTAMP(6) FROM {TASK} WHERE daemon_id IS NULL "
            "AND paused_since IS NULL AND not_before > UTC_TIMESTAMP(6) "
            "AND not_before < UTC_TIMESTAMP(6) + INTERVAL %s MICROSECOND AND "
            + _in("type_id", type_ids), [int(within * 1_000_000), *type_ids])
        first, now = cursor.fetchone()
    if first is None:
        return None
    return max(0.0, (first - now).total_seconds())


START = (
    f"UPDATE {INSTANCE} SET status = '{Status.RUNNING}', started = %s, updated = %s "
    f"WHERE id = %s AND status = '{Status.SCHEDULED}' AND attempt = %s"
)


def start(pk, attempt, daemon):
    """Move attempt ``attempt`` of task ``pk`` to RUNNING; return the task with its type and
    inputs. Run it in a transaction. Raise ``InvalidTransition`` (or
    ``AttemptSuperseded``) when it is not SCHEDULED on that attempt."""
    with connections[database()].cursor() as cursor:
        now = _now(cursor)
        cursor.execute(START, [now, now, pk, attempt])
        if cursor.rowcount != 1:
            raise refusal(pk, Status.RUNNING, attempt=attempt)
        cursor.execute(LOG_ROW, [pk, now, Status.RUNNING, attempt, "", daemon_label(daemon), ""])
        cursor.execute(f"SELECT {INSTANCE_COLUMNS} FROM {INSTANCE} WHERE id = %s", [pk])
        instance = build(Instance, cursor.fetchone())
        cursor.execute(f"SELECT {TYPE_COLUMNS} FROM {TYPE} WHERE id = %s", [instance.type_id])
        instance.type = build(Type, cursor.fetchone())
        cursor.execute(f"SELECT {columns(Inputs, INPUTS)} FROM {INPUTS} WHERE instance_id = %s",
                       [pk])
        instance.inputs = build(Inputs, cursor.fetchone())
    return instance


DEQUEUE = f"DELETE FROM {TASK} WHERE instance_id = %s AND daemon_id IS NOT NULL"
FINISH = (
    f"UPDATE {INSTANCE} SET status = '{Status.FINISHED}', finished = %s, updated = %s "
    f"WHERE id = %s AND attempt = %s AND {one_of('status', ENDS_FROM[Status.FINISHED])}"
)


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
        cursor.execute(DEQUEUE, [pk])
        if cursor.rowcount == 1:
            cursor.execute(FINISH, [now, now, pk, attempt])
        if cursor.rowcount != 1:
            raise refusal(pk, Status.FINISHED, attempt=attempt)
        cursor.execute(LOG_ROW, [pk, now, Status.FINISHED, attempt, message,
                                 daemon_label(daemon), ""])
        if response is not None:
            cursor.execute(STORE, [pk, data, content_type, charset, len(data), now])
    return attempt


def _ends_statement(count):
    """Write ``count`` ends and starts decided by the settle: parameters: per attempt its
    key, state, start (None: unchanged) and end (None: unchanged), then the moment."""
    row = "SELECT %s AS id, %s AS status, %s AS started, %s AS finished"
    batch = " UNION ALL ".join([row] * count)
    return (f"UPDATE {INSTANCE} i JOIN ({batch}) b ON b.id = i.id "
            "SET i.status = b.status, i.updated = %s, "
            "i.started = COALESCE(b.started, i.started), "
            "i.finished = COALESCE(b.finished, i.finished)")


def settle(daemon, outcomes, *, now=None):
    """Write the ends (FINISHED or FAILED ``Outcome``) and unwritten starts of many
    attempts; return the keys of the tasks written. Run it in a transaction. An outcome
    whose attempt was superseded, or whose task is not in a state to move so, or that
    holds no lease, writes nothing.

    The queue rows and the tasks are read locked first; what each outcome may write is
    decided on what they hold (the same guards as ``postgresql.SETTLE``).
    """
    outcomes = list(outcomes)
    if not outcomes:
        return set()
    pks = sorted({outcome.pk for outcome in outcomes})
    with connections[database()].cursor() as cursor:
        if now is None:
            now = _now(cursor)
        cursor.execute(f"SELECT instance_id, claimed FROM {TASK} WHERE {_in('instance_id', pks)} "
                       "AND daemon_id IS NOT NULL ORDER BY instance_id FOR UPDATE", pks)
        held = dict(cursor.fetchall())
        if not held:
            return set()
        leased = sorted(held)
        cursor.execute(f"SELECT id, status, attempt FROM {INSTANCE} WHERE {_in('id', leased)} "
                       "ORDER BY id FOR UPDATE", leased)
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
            writes[pk] = (str(status), began, ended)
            if ended is not None:
                dequeued.append(pk)
                entries.append((pk, now, status, attempt, outcome.message, label, ""))
                if outcome.response is not None:
                    data, content_type, charset = outcome.response
                    stored.append((pk, data, content_type, charset, len(data), now))
        if writes:
            cursor.execute(_ends_statement(len(writes)), [
                *(value for pk, row in writes.items() for value in (pk, *row)), now])
        if dequeued:
            cursor.execute(f"DELETE FROM {TASK} WHERE {_in('instance_id', dequeued)}", dequeued)
        if entries:
            cursor.executemany(LOG_ROW, entries)
        if stored:
            cursor.executemany(STORE, stored)
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
    row, inputs and first history entry, many rows a statement; return ``(key,
    identifier, creation time)`` per task, or None when ``task_type`` changed since it
    was read. Run it in a transaction. Raise ``IntegrityError`` for a live duplicate.
    """
    connection = connections[database()]
    size = max((len(item.encode("utf-8")) for item in data), default=0)
    with connection.cursor() as cursor:
        statement, params = type_as_read(task_type, size, named)
        cursor.execute(TYPE_AS_READ_NOW[statement], params)
        row = cursor.fetchone()
        if row is None:
            return None
        now = row[0]
        moment = _aware(now)
        begins = (not_before if not isinstance(not_before, datetime.timedelta)
                  else moment + not_before)
        keys = _insert_instances(cursor, connection, identifiers, {
            "type_id": task_type.pk, "priority": priority, "created": moment,
            "updated": moment, "named": named, "batch_id": current_batch_id(), "tag": tag})
        varying = {"instance_id": keys, "identifier": identifiers, "data": data}
        for model, given, names in (
            (Task, {"type_id": task_type.pk, "priority": priority, "enqueued": moment,
                    "not_before": begins, "tag": tag}, ("instance_id", "identifier")),
            (Inputs, {"input_format": task_type.input_format}, ("instance_id", "data")),
            (LogRecord, {"status": Status.ACCEPTED, "message": "enqueued", "time": moment},
             ("instance_id",)),
        ):
            _insert_rows(cursor, connection, model, given, {name: varying[name] for name in names})
    if notify:
        notify_runnable()
    return [(key, identifier, moment) for key, identifier in zip(keys, identifiers, strict=True)]


#: ``TYPE_AS_READ`` (and its named form) as the enqueue runs it: the type's row locked
#: shared (an operator's change of the type waits for the enqueue), and the clock read.
TYPE_AS_READ_NOW = {
    statement: statement.replace("SELECT 1 ", "SELECT UTC_TIMESTAMP(6) ", 1) + " LOCK IN SHARE MODE"
    for statement in (sql.TYPE_AS_READ, sql.NAMED_TYPE_AS_READ)}


def _insert_statement(model, count):
    fields = stored_fields(model)
    marks = f"({', '.join(['%s'] * len(fields))})"
    return (f"INSERT INTO {model._meta.db_table} ({', '.join(field.column for field in fields)}) "
            f"VALUES {', '.join([marks] * count)}")


def _rows(model, connection, given, varying):
    """Return one row of ``model`` per item of the lists ``varying`` (attname -> values),
    with ``given`` values otherwise (``row_values``), prepared once and varied per row."""
    template = row_values(model, connection, given)
    names = [field.attname for field in stored_fields(model)]
    fields = dict(zip(names, stored_fields(model), strict=True))
    places = [(names.index(name), fields[name], values) for name, values in varying.items()]
    rows = []
    for number in range(len(next(iter(varying.values())))):
        row = list(template)
        for index, field, values in places:
            row[index] = field.get_db_prep_save(values[number], connection)
        rows.append(row)
    return rows


def _chunks(rows):
    """Yield ``rows`` in runs of at most ``ROWS_PER_INSERT`` rows and, but for a row
    alone, ``INPUTS_BYTES_PER_INSERT`` characters of text (a character escaped takes at
    most 8 bytes: well within ``max_allowed_packet``)."""
    chunk, size = [], 0
    for row in rows:
        length = sum(len(value) for value in row if isinstance(value, (str, bytes)))
        if chunk and (len(chunk) == ROWS_PER_INSERT or size + length > INPUTS_BYTES_PER_INSERT):
            yield chunk
            chunk, size = [], 0
        chunk.append(row)
        size += length
    if chunk:
        yield chunk


def _insert_rows(cursor, connection, model, given, varying):
    """Insert one row of ``model`` per item of the lists ``varying`` (see ``_rows``)."""
    for chunk in _chunks(_rows(model, connection, given, varying)):
        cursor.execute(_insert_statement(model, len(chunk)),
                       [value for row in chunk for value in row])


def _insert_instances(cursor, connection, identifiers, given):
    """Insert one instance per identifier (unique in the batch) with ``given`` values;
    return their keys in the order of ``identifiers``.

    MariaDB returns them (``RETURNING``). MySQL has no ``RETURNING``; InnoDB gives the
    rows of one multi-row INSERT whose row count is known consecutive keys from the
    first (``LAST_INSERT_ID()``), whatever its ``innodb_autoinc_lock_mode``: a batch's
    are read back by that range and checked against its identifiers all the same."""
    rows = _rows(Instance, connection, given, {"identifier": identifiers})
    returning = connection.features.can_return_rows_from_bulk_insert
    keys = []
    begin = 0
    for chunk in _chunks(rows):
        statement = _insert_statement(Instance, len(chunk))
        cursor.execute(statement + " RETURNING id" if returning else statement,
                       [value for row in chunk for value in row])
        names, begin = identifiers[begin:begin + len(chunk)], begin + len(chunk)
        if returning:
            keys += [pk for (pk,) in cursor.fetchall()]
            continue
        first = cursor.lastrowid
        if len(chunk) == 1:
            keys.append(first)
            continue
        cursor.execute(f"SELECT id, identifier FROM {INSTANCE} WHERE id >= %s AND id < %s "
                       "ORDER BY id", [first, first + len(chunk)])
        found = cursor.fetchall()
        if [identifier for _, identifier in found] != names:
            raise RuntimeError("the keys of a multi-row INSERT were not consecutive: atp "
                               "cannot tell its tasks' keys (innodb_autoinc_lock_mode?)")
        keys += [pk for pk, _ in found]
    return keys


def enqueue(task_type, instance, data, not_before, size, notify):
    """Write one task (``enqueue_many`` of one, ``sql.enqueue_one``)."""
    return enqueue_one(enqueue_many, task_type, instance, data, not_before, notify)


class MySQLEngine(StatementsEngine):
    """Each verb a few statements built once, in one transaction, with row locks: claims
    skip each other's rows (``SKIP LOCKED``)."""

    name = "mysql"
    statements = sys.modules[__name__]
