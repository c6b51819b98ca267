"""The verbs every task goes through (enqueue, claim, start, settle), as precompiled SQL on
SQLite.

Written with the ORM, each verb compiles 3 to 6 queries every time it runs, and the
daemon and its workers spend most of their time compiling. Here each verb is a few
statements whose text is built once, run in one immediate transaction (SQLite's single
write lock serialises them with every other writer), with the same guards, history and
fencing as the portable engine (``orm``) and the operators' verbs. SQLite has no
data-modifying common table expressions, but has ``UPDATE ... RETURNING`` (3.35 and
newer; older libraries get the ``orm`` engine). ``SQLiteEngine`` implements the
contract (``atp.engine.contract``).

On SQLite the database clock is this host's clock (the library runs in this process),
so one reading of it (``timezone.now()``) serves every timestamp a verb writes.
"""

import collections
import datetime
import math
import sqlite3
import sys

from django.db import connections
from django.utils import timezone

from atp.engine.base import daemon_label, database
from atp.engine.batches import current_batch_id
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

#: Whether this SQLite library has ``RETURNING``.
IS_SUPPORTED = sqlite3.sqlite_version_info >= (3, 35)
#: Its verbs are several statements: they run in an immediate transaction.
ONE_STATEMENT = False

DAEMON = Daemon._meta.db_table

# The guards, from atp.states.TRANSITIONS.
CLAIMABLE = sources_of(Status.SCHEDULED)
FINISHABLE = sources_of(Status.FINISHED)


def _in(name, values):
    """Return ``name IN (%s, ...)`` with a placeholder per value."""
    return f"{name} IN ({', '.join(['%s'] * len(values))})"


def _stamp(value):
    """Return a datetime as Django stores it on SQLite (naive UTC text)."""
    return connections[database()].ops.adapt_datetimefield_value(value)


ALIVE = f"SELECT 1 FROM {DAEMON} WHERE id = %s AND stopped IS NULL"
# Never a pull type: its tasks are leased by consumers (atp.engine.pull), not daemons.
TYPES = f"SELECT {columns(Type, TYPE)} FROM {TYPE} WHERE is_paused = 0 AND pull = 0 AND "


def _schedule_statement(count, start):
    """Schedule ``count`` tasks, the first ``start`` of which (in the order of their keys'
    parameters) are started too; parameters: the daemon, the moment (twice), the keys
    to start, the keys."""
    started = _in("id", range(start)) if start else "0"
    return (
        f"UPDATE {INSTANCE} SET status = CASE WHEN {started} THEN '{Status.RUNNING}' "
        f"ELSE '{Status.SCHEDULED}' END, attempt = attempt + 1, daemon_id = %s, updated = %s, "
        f"started = CASE WHEN {started} THEN %s ELSE started END "
        f"WHERE {_in('id', range(count))} AND {one_of('status', CLAIMABLE)} "
        f"RETURNING {columns(Instance, INSTANCE)}"
    )




def _waiting_statement(type_count, *, columns="instance_id"):
    """Select the runnable tasks of ``type_count`` types in claim order, walking the claim
    index; parameters: the moment, the types, the limit."""
    return (
        f"SELECT {columns} FROM {TASK} INDEXED BY {CLAIM_INDEX} "
        "WHERE daemon_id IS NULL AND paused_since IS NULL AND not_before <= %s "
        f"AND {_in('type_id', range(type_count))} {CLAIM_ORDER_SQL} LIMIT %s"
    )


def _waiting_within_limits(free_types, limited_types):
    """Select the runnable tasks of ``free_types`` types without a limit and of
    ``limited_types`` types each within its free slots, in claim order; parameters: per
    part, the moment, its types and its limit (the first part's only when
    ``free_types``), then the whole limit."""
    part = "SELECT * FROM ({})"
    parts = [part.format(_waiting_statement(1, columns="instance_id, priority, not_before"))
             ] * limited_types
    if free_types:
        parts.insert(0, part.format(_waiting_statement(
            free_types, columns="instance_id, priority, not_before")))
    return f"SELECT instance_id FROM ({' UNION ALL '.join(parts)}) {CLAIM_ORDER_SQL} LIMIT %s"


LEASES = f"SELECT type_id, count(*) FROM {TASK} WHERE daemon_id IS NOT NULL AND "


LEASE = f"UPDATE {TASK} SET daemon_id = %s, claimed = %s, deadline = %s WHERE instance_id = %s"
LOG_ROW = f"{LOG_COLUMNS} VALUES (%s, %s, %s, %s, %s, %s, '')"


def claim(daemon, limit, type_ids, start=0, inputs=False):
    """Lease and schedule up to ``limit`` runnable tasks of the types ``type_ids``, within
    their concurrency limits; return ``(instances, strays)``. The first ``start`` tasks
    in claim order are started too (RUNNING, after their SCHEDULED history entry). With
    ``inputs`` they come with their inputs. Every claim reads the limits.

    Run it in an immediate transaction. Raise ``DaemonStopped``.
    """
    start = check_start(start)
    connection = connections[database()]
    moment = timezone.now()
    now = _stamp(moment)
    type_ids = list(type_ids)
    with connection.cursor() as cursor:
        cursor.execute(ALIVE, [daemon.pk])
        if cursor.fetchone() is None:
            raise DaemonStopped(f"daemon {daemon} was declared stopped; it claims nothing")
        if not type_ids:
            return [], []
        cursor.execute(TYPES + _in("id", type_ids), type_ids)
        types = {row[0]: build(Type, row) for row in cursor.fetchall()}
        if not types:
            return [], []
        buckets = {pk: tokens_now(kind.rate, kind.bucket_size, kind.tokens, kind.tokens_at, moment)
                   for pk, kind in types.items() if kind.rate is not None}
        waiting = _waiting(cursor, types, now, limit, buckets)
        if waiting is None:  # every type is at its limit
            return [], []
        cursor.execute(*waiting)
        keys = [row[0] for row in cursor.fetchall()]
        if not keys:
            return [], []
        starting = keys[:start]
        cursor.execute(_schedule_statement(len(keys), len(starting)),
                       [*starting, daemon.pk, now, *starting, now, *keys])
        instances = {row[0]: build(Instance, row) for row in cursor.fetchall()}
        claimed = []
        for pk in keys:  # in claim order
            instance = instances.get(pk)
            if instance is not None:
                instance.type = types[instance.type_id]
                claimed.append(instance)
        cursor.executemany(LEASE, [
            (daemon.pk, now, _stamp(moment + instance.type.timeout), instance.pk)
            for instance in claimed])
        label = daemon_label(daemon)
        cursor.executemany(LOG_ROW, [
            (instance.pk, now, step, instance.attempt, "", label)
            for instance in claimed
            for step in ((Status.SCHEDULED, Status.RUNNING)
                         if instance.status == Status.RUNNING else (Status.SCHEDULED,))])
        if inputs and claimed:
            pks = [instance.pk for instance in claimed]
            cursor.execute(f"SELECT {columns(Inputs, INPUTS)} FROM {INPUTS} "
                           f"WHERE {_in('instance_id', pks)}", pks)
            loaded = {row.instance_id: row for row in map(_inputs, cursor.fetchall())}
            for instance in claimed:
                instance.inputs = loaded[instance.pk]
        if buckets:
            spent = collections.Counter(instance.type_id for instance in claimed)
            cursor.executemany(SPEND, [(tokens - spent[pk], now, pk)
                                       for pk, tokens in buckets.items() if spent[pk]])
    return claimed, [pk for pk in keys if pk not in instances]


#: A type's bucket after a claim took tokens from it (``atp.rates``).
SPEND = f"UPDATE {TYPE} SET tokens = %s, tokens_at = %s WHERE id = %s"


def _waiting(cursor, types, now, limit, buckets):
    """Return the statement and parameters selecting the keys of up to ``limit`` runnable
    tasks of ``types`` in claim order (None when there is no free slot), each type with a
    concurrency limit within its free slots (its limit less its leases), and each with a
    rate within the whole tokens of its bucket (``buckets``: type id -> tokens now),
    counted in this transaction (which holds the write lock, so no other claim can take
    a slot or a token meanwhile)."""
    limits = {pk: kind.max_concurrency for pk, kind in types.items()
              if kind.max_concurrency is not None}
    if not (limits or buckets):
        return _waiting_statement(len(types)), [now, *types, limit]
    leases = {}
    if limits:
        cursor.execute(LEASES + _in("type_id", limits) + " GROUP BY type_id", list(limits))
        leases = dict(cursor.fetchall())
    free = {pk: limit for pk in limits.keys() | buckets.keys()}
    for pk, most in limits.items():
        free[pk] = min(free[pk], most - leases.get(pk, 0))
    for pk, tokens in buckets.items():
        free[pk] = min(free[pk], math.floor(tokens))
    limited = [pk for pk, slots in free.items() if slots > 0]
    unlimited = [pk for pk in types if pk not in free]
    params = [now, *unlimited, limit] if unlimited else []
    for pk in limited:
        params += [now, pk, free[pk]]
    if not (limited or unlimited):
        return None
    return _waiting_within_limits(len(unlimited), len(limited)), [*params, limit]


def _next_due_statement(type_count):
    """See ``postgresql.NEXT_DUE``; parameters: the moment, the bound, the types."""
    return (
        "WITH RECURSIVE levels(priority) AS ("
        f" SELECT * FROM (SELECT priority FROM {TASK} INDEXED BY {CLAIM_INDEX}"
        "  WHERE daemon_id IS NULL ORDER BY priority DESC LIMIT 1)"
        " UNION ALL"
        f" SELECT (SELECT t.priority FROM {TASK} t INDEXED BY {CLAIM_INDEX}"
        "  WHERE t.daemon_id IS NULL AND t.priority < l.priority ORDER BY t.priority DESC LIMIT 1)"
        " FROM levels l WHERE l.priority IS NOT NULL)"
        f" SELECT min((SELECT t.not_before FROM {TASK} t INDEXED BY {CLAIM_INDEX}"
        "  WHERE t.daemon_id IS NULL AND t.priority = l.priority AND t.not_before > %s"
        "  AND t.not_before < %s"
        f"  AND t.paused_since IS NULL AND {_in('t.type_id', range(type_count))}"
        "  ORDER BY t.not_before LIMIT 1)) FROM levels l WHERE l.priority IS NOT NULL"
    )


def next_due(type_ids, within):
    """Return in how many seconds the first task of ``type_ids`` waiting for its time
    becomes runnable, if within ``within`` seconds; else None (``postgresql.next_due``)."""
    type_ids = list(type_ids)
    if not type_ids:
        return None
    connection = connections[database()]
    moment = timezone.now()
    with connection.cursor() as cursor:
        bound = moment + datetime.timedelta(seconds=within)
        cursor.execute(_next_due_statement(len(type_ids)),
                       [_stamp(moment), _stamp(bound), *type_ids])
        row = cursor.fetchone()
    if row is None or row[0] is None:
        return None
    when = datetime.datetime.fromisoformat(str(row[0])).replace(tzinfo=datetime.UTC)
    return max(0.0, (when - moment).total_seconds())


def _inputs(row):
    return build(Inputs, row)


START = (
    f"UPDATE {INSTANCE} SET status = '{Status.RUNNING}', started = %s, updated = %s "
    f"WHERE id = %s AND status = '{Status.SCHEDULED}' AND attempt = %s "
    f"RETURNING {columns(Instance, INSTANCE)}"
)
TYPE_OF = f"SELECT {columns(Type, TYPE)} FROM {TYPE} WHERE id = %s"
INPUTS_OF = f"SELECT {columns(Inputs, INPUTS)} FROM {INPUTS} WHERE instance_id = %s"


def start(pk, attempt, daemon):
    """Move attempt ``attempt`` of task ``pk`` to RUNNING; return the task with its type and
    inputs. Run it in an immediate transaction. Raise ``InvalidTransition`` (or
    ``AttemptSuperseded``) when it is not SCHEDULED on that attempt."""
    now = _stamp(timezone.now())
    with connections[database()].cursor() as cursor:
        cursor.execute(START, [now, now, pk, attempt])
        row = cursor.fetchone()
        if row is None:
            raise refusal(pk, Status.RUNNING, attempt=attempt)
        instance = build(Instance, row)
        cursor.execute(LOG_ROW, [pk, now, Status.RUNNING, attempt, "", daemon_label(daemon)])
        cursor.execute(TYPE_OF, [instance.type_id])
        instance.type = build(Type, cursor.fetchone())
        cursor.execute(INPUTS_OF, [pk])
        instance.inputs = build(Inputs, cursor.fetchone())
    return instance


DEQUEUE = f"DELETE FROM {TASK} WHERE instance_id = %s AND daemon_id IS NOT NULL"
FINISH = (
    f"UPDATE {INSTANCE} SET status = '{Status.FINISHED}', finished = %s, updated = %s "
    f"WHERE id = %s AND attempt = %s AND {one_of('status', FINISHABLE)}"
)
STORE = (
    f"INSERT INTO {RESPONSE} "
    "(instance_id, data, content_type, charset, size, stored) VALUES (%s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (instance_id) DO UPDATE SET data = excluded.data, "
    "content_type = excluded.content_type, charset = excluded.charset, size = excluded.size, "
    "stored = excluded.stored"
)


def finish(pk, attempt, message, daemon, response, content_type):
    """Move attempt ``attempt`` of task ``pk`` to FINISHED with its response; return the attempt.

    Run it in an immediate transaction. Raise ``InvalidResponse`` before writing for a
    response that cannot be stored, ``InvalidTransition`` (the caller's transaction then
    rolls back) when the task is not running on that attempt or holds no lease.
    """
    if response is not None:
        data, content_type, charset = encode_response(
            response, content_type, max_bytes=response_limit(pk))
    now = _stamp(timezone.now())
    with connections[database()].cursor() as cursor:
        cursor.execute(DEQUEUE, [pk])
        if cursor.rowcount == 1:
            cursor.execute(FINISH, [now, now, pk, attempt])
        if cursor.rowcount != 1:
            raise refusal(pk, Status.FINISHED, attempt=attempt)
        cursor.execute(LOG_ROW, [pk, now, Status.FINISHED, attempt, message,
                                 daemon_label(daemon)])
        if response is not None:
            cursor.execute(STORE, [pk, data, content_type, charset, len(data), now])
    return attempt


# An end is written only while its attempt holds its lease and may move to its state;
# the queue row goes once the task's row matched (no savepoint to roll back to).
LEASED = f"EXISTS (SELECT 1 FROM {TASK} WHERE instance_id = %s AND daemon_id IS NOT NULL)"
END = (
    f"UPDATE {INSTANCE} SET status = %s, finished = %s, updated = %s "
    f"WHERE id = %s AND attempt = %s AND status IN ({{sources}}) AND {LEASED}"
)
ENDS = {
    target: END.format(sources=", ".join(repr(str(state)) for state in sorted(sources_of(target))))
    for target in (Status.FINISHED, Status.FAILED)
}
# An attempt whose start is not written yet: from SCHEDULED to RUNNING, and on to its
# end when it has one (``finished`` is left as it is for RUNNING).
# Its start is dated when it started, never before its claim.
START_AND_END = (
    f"UPDATE {INSTANCE} SET status = %s, updated = %s, "
    f"started = MAX(%s, (SELECT claimed FROM {TASK} WHERE instance_id = %s)), "
    f"finished = CASE WHEN %s = '{Status.RUNNING}' THEN finished ELSE %s END "
    f"WHERE id = %s AND attempt = %s AND status = '{Status.SCHEDULED}' AND {LEASED} "
    "RETURNING started"
)


def settle(daemon, outcomes):
    """Write the ends (FINISHED or FAILED ``Outcome``) and unwritten starts of many
    attempts; return the keys of the tasks written. Run it in an immediate transaction.
    An outcome whose attempt was superseded, or whose task is not in a state to move
    so, writes nothing."""
    moment = timezone.now()
    now = _stamp(moment)
    label = daemon_label(daemon)
    written = set()
    with connections[database()].cursor() as cursor:
        for outcome in outcomes:
            pk, attempt, status = outcome.pk, outcome.attempt, outcome.status
            row = None
            if outcome.started_ago is not None:
                began = _stamp(moment - datetime.timedelta(seconds=outcome.started_ago))
                cursor.execute(START_AND_END,
                               [status, now, began, pk, status, now, pk, attempt, pk])
                row = cursor.fetchone()
                if row is not None:
                    cursor.execute(LOG_ROW, [pk, row[0], Status.RUNNING, attempt, "", label])
            if row is None:  # started already (or its start was not to write): an end only
                if status == Status.RUNNING:
                    continue
                cursor.execute(ENDS[status], [status, now, now, pk, attempt, pk])
                if cursor.rowcount != 1:
                    continue
            written.add(pk)
            if status == Status.RUNNING:
                continue
            cursor.execute(DEQUEUE, [pk])
            cursor.execute(LOG_ROW, [pk, now, status, attempt, outcome.message, label])
            if outcome.response is not None:
                data, content_type, charset = outcome.response
                cursor.execute(STORE, [pk, data, content_type, charset, len(data), now])
    return written


def settle_and_claim(daemon, outcomes, limit, type_ids, start):
    """``settle`` then ``claim`` (starting ``start`` tasks, all with their inputs); return
    ``(keys of the tasks settled, what claim returns)``. Run it in an immediate
    transaction: one commit for both (the claim counts the leases the settle ended)."""
    return settle(daemon, outcomes), claim(daemon, limit, type_ids, start, inputs=True)


def enqueue_many(task_type, identifiers, data, priority, not_before, notify, tag=None,
                 named=False):
    """Write tasks of ``task_type`` (an identifier and encoded inputs each): instance, queue
    row, inputs and first history entry, with statements built once; return ``(key,
    identifier, creation time)`` per task, or None when ``task_type`` changed since it
    was read. Run it in an immediate transaction. Raise ``IntegrityError`` for a live
    duplicate.
    """
    connection = connections[database()]
    moment = timezone.now()
    start = not_before if not isinstance(not_before, datetime.timedelta) else moment + not_before
    size = max((len(item.encode("utf-8")) for item in data), default=0)
    with connection.cursor() as cursor:
        cursor.execute(*type_as_read(task_type, size, named))
        if cursor.fetchone() is None:
            return None
        keys = _insert_instances(cursor, connection, identifiers, {
            "type_id": task_type.pk, "priority": priority, "created": moment,
            "updated": moment, "named": named, "batch_id": current_batch_id(), "tag": tag})
        columns = {"instance_id": keys, "identifier": identifiers, "data": data}
        for model, given, varying in (
            (Task, {"type_id": task_type.pk, "priority": priority, "enqueued": moment,
                    "not_before": start, "tag": tag}, ("instance_id", "identifier")),
            (Inputs, {"input_format": task_type.input_format}, ("instance_id", "data")),
            (LogRecord, {"status": Status.ACCEPTED, "message": "enqueued", "time": moment},
             ("instance_id",)),
        ):
            _insert_rows(cursor, connection, model, given, {
                name: columns[name] for name in varying})
    if notify:
        notify_runnable()
    return [(key, identifier, moment) for key, identifier in zip(keys, identifiers, strict=True)]


#: SQLite takes at most 32,766 parameters a statement (3.32 and newer).
MAX_PARAMETERS = 32766


def _insert_rows(cursor, connection, model, given, varying, *, returning=""):
    """Insert one row of ``model`` per item of the lists ``varying`` (column attname ->
    its values, all as long), with ``given`` values otherwise (see ``row_values``); return what ``returning``
    selects of them. The values all rows share are bound once a statement and each row
    binds only its own: one statement per 30,000-odd values (binding every column of
    every row cost a tenth of a bulk enqueue)."""
    fields = stored_fields(model)
    values = row_values(model, connection, given)
    names = [field.attname for field in fields]
    own = {names.index(name): number for number, name in enumerate(varying, start=1)}
    picked = ", ".join(f"v.column{own[index]}" if index in own else "%s"
                       for index in range(len(fields)))
    shared = [value for index, value in enumerate(values) if index not in own]
    columns = ", ".join(field.column for field in fields)
    rows = list(zip(*varying.values(), strict=True))
    marks = f"({', '.join(['%s'] * len(varying))})"
    per_statement = (MAX_PARAMETERS - len(shared)) // len(varying)
    suffix = f" RETURNING {returning}" if returning else ""
    found = []
    for begin in range(0, len(rows), per_statement):
        chunk = rows[begin:begin + per_statement]
        cursor.execute(
            f"INSERT INTO {model._meta.db_table} ({columns}) SELECT {picked} "
            f"FROM (VALUES {', '.join([marks] * len(chunk))}) AS v{suffix}",
            [*shared, *(value for row in chunk for value in row)])
        if returning:
            found += cursor.fetchall()
    return found


def _insert_instances(cursor, connection, identifiers, given):
    """Insert one instance per identifier (unique in the batch) with ``given`` values (see
    ``row_values``); return their keys in the order of ``identifiers``."""
    keys = dict((identifier, key) for key, identifier in _insert_rows(
        cursor, connection, Instance, given, {"identifier": identifiers},
        returning="id, identifier"))
    return [keys[identifier] for identifier in identifiers]


def enqueue(task_type, instance, data, not_before, size, notify):
    """Write one task (``enqueue_many`` of one); return its key and creation time, or None
    when ``task_type`` changed since it was read."""
    rows = enqueue_many(task_type, [instance.identifier], [data], instance.priority, not_before,
                        notify, tag=instance.tag, named=instance.named)
    return None if rows is None else rows[0][::2]


class SQLiteEngine(StatementsEngine):
    """Each verb a few statements built once, in one immediate transaction (the
    database's single write lock serialises them with every other writer)."""

    name = "sqlite"
    one_statement = ONE_STATEMENT
    statements = sys.modules[__name__]

    def claim(self, daemon, limit, type_ids, *, start=0, inputs=False, limited=False):
        return self.transaction(lambda: claim(daemon, limit, type_ids, start, inputs))

    def settle_and_claim(self, daemon, outcomes, limit, type_ids, *, start, limited=False):
        return self.transaction(
            lambda: settle_and_claim(daemon, outcomes, limit, type_ids, start))
