"""The verbs every task goes through, as one SQL statement each on PostgreSQL.

A drained queue costs a claim, a start and a finish per task. Written with the ORM
they take 3 to 6 statements each, and the daemon's time goes to round trips and query
compilation. On PostgreSQL each is a single statement of data-modifying common table
expressions, run in the same queue transaction, with the same guards, the same history
and the same locking order (queue row before task row) as the portable engine
(``orm``) and the operators' verbs. So is a single enqueue, sent with its NOTIFY in one
round trip. ``PostgreSQLEngine`` implements the contract (``atp.engine.contract``); the
test suite runs on it and on the ``orm`` engine, held to the same behaviour.
"""

import datetime
import sys

from django.db import connections, transaction

from atp.conf import conf
from atp.engine.base import daemon_label, database
from atp.engine.batches import current_batch_id
from atp.engine.notify import QUEUE_CHANNEL
from atp.engine.records import response_limit
from atp.engine.sql import (
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
    stored_fields,
    type_as_read,
    width,
)
from atp.engine.transitions import refusal
from atp.exceptions import DaemonStopped
from atp.models import Daemon, Inputs, Instance, LogRecord, Task, Type
from atp.rates import DEFAULT_BUCKET_SIZE
from atp.serialization import encode_response
from atp.states import Status, sources_of

INSTANCE_WIDTH = width(Instance)
TYPE_WIDTH = width(Type)
DAEMON = Daemon._meta.db_table

#: An engine whose verbs are one statement each: they run in autocommit mode (one round
#: trip), or in a savepoint of the caller's transaction.
ONE_STATEMENT = True

# The types the claim may take: those of ``%(types)s`` not paused. The order of locks
# is the one of ``atp.engine.locks``: the daemon's row (KEY SHARE, which the leases'
# foreign key takes anyway: a reaper's FOR UPDATE before it declares the daemon stopped
# waits for this claim, or this claim for the reaper), the queue rows (skipping those
# another claim holds), then the tasks. A row whose task is not ACCEPTED is not taken;
# its key comes back in ``strays`` for repair.
#
# ``picked`` differs with the types' limits. Without a limit, the claim walks the claim
# index for all its types at once. When one of them has a concurrency limit or a rate
# (``is_limited``), that claim takes nothing and says so (``limited``), and the claim
# within limits serves:
# it runs after ``LOCK_LIMITED`` in the same transaction, a statement of its own so
# that it reads the leases after the types' locks are held (a single statement would
# count them as they were when it began, before another claim of the same types
# committed). It takes at most the free slots of each limited type (its
# ``max_concurrency`` less its leases, less none for the leases this statement itself
# ends: ``released``), and of a type with a rate at most the whole tokens in its
# bucket (``atp.rates``: refilled since the last claim, ``bucket``), walking the claim
# index once per limited type and once for the others, and keeps the first ``limit``
# in claim order. The same statement takes a token per task leased (``spent``). A
# type the locks did not take
# (it was not limited, or paused, when they were taken, and is now) gets no slot this
# round: its leases were counted without its lock (``atp.locked_types``, set by
# ``LOCK_LIMITED`` for the transaction).
_KINDS_AND_ALIVE = f"""
kinds AS (
    SELECT id, max_concurrency, rate, bucket_size, tokens, tokens_at,
        (max_concurrency IS NOT NULL OR rate IS NOT NULL) AS is_limited
    FROM {TYPE} WHERE id = ANY(%(types)s::bigint[]) AND NOT is_paused AND NOT pull
), alive AS (
    SELECT id FROM {DAEMON} WHERE id = %(daemon)s AND stopped IS NULL FOR KEY SHARE
),"""
_WAITING = f"""FROM {TASK}
    WHERE daemon_id IS NULL AND paused_since IS NULL AND not_before <= STATEMENT_TIMESTAMP()
        AND EXISTS (SELECT 1 FROM alive)"""
_PICKED = f"""
limited AS (
    SELECT 1 FROM kinds WHERE is_limited LIMIT 1
), picked AS (
    SELECT instance_id, priority, not_before {_WAITING}
        AND type_id = ANY(ARRAY(SELECT id FROM kinds)) AND NOT EXISTS (SELECT 1 FROM limited)
    {CLAIM_ORDER_SQL} LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),"""


def _picked_within_limits(released):
    """Return ``limited`` (always empty) and ``picked`` of the claim within limits;
    ``released`` is a relation of the types of the leases the statement ends, or None."""
    ended = "" if released is None else (
        f"+ (SELECT count(*) FROM {released} r WHERE r.type_id = b.id)")
    return f"""
limited AS (
    SELECT 1 WHERE false
), bucket AS (
    SELECT k.*, k.id = ANY(
            string_to_array(current_setting('atp.locked_types', true), ',')::bigint[]) AS locked,
        CASE WHEN k.rate IS NULL THEN NULL WHEN k.tokens IS NULL OR k.tokens_at IS NULL
            THEN coalesce(k.bucket_size, {DEFAULT_BUCKET_SIZE})
        ELSE LEAST(coalesce(k.bucket_size, {DEFAULT_BUCKET_SIZE}), k.tokens + k.rate * GREATEST(0,
            EXTRACT(EPOCH FROM STATEMENT_TIMESTAMP() - k.tokens_at)))
        END AS tokens_now
    FROM kinds k WHERE k.is_limited
), quota AS (
    SELECT b.id, CASE WHEN b.locked
        THEN GREATEST(0, LEAST(%(limit)s,
            coalesce(b.max_concurrency - (
                SELECT count(*) FROM {TASK} l WHERE l.type_id = b.id AND l.daemon_id IS NOT NULL)
                {ended}, %(limit)s),
            coalesce(floor(b.tokens_now)::bigint, %(limit)s)))
        ELSE 0 END AS free
    FROM bucket b
), unlimited AS (
    SELECT instance_id, priority, not_before {_WAITING}
        AND type_id = ANY(ARRAY(SELECT id FROM kinds WHERE NOT is_limited))
    {CLAIM_ORDER_SQL} LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), within AS (
    SELECT w.instance_id, w.priority, w.not_before FROM quota q CROSS JOIN LATERAL (
        SELECT instance_id, priority, not_before {_WAITING} AND type_id = q.id
        {CLAIM_ORDER_SQL} LIMIT q.free
        FOR UPDATE SKIP LOCKED) w
), picked AS (
    SELECT instance_id, priority, not_before FROM unlimited
    UNION ALL
    SELECT instance_id, priority, not_before FROM within
    {CLAIM_ORDER_SQL} LIMIT %(limit)s
),"""


def _claim_steps(picked, *, spends=False):
    """Return the claim's steps after ``picked``; with ``spends``, a last step takes a token
    from the bucket of each rate-limited type locked (``bucket``) per task it leased (a
    bucket none was taken from is left as it is: its refill counts from the same time)."""
    spent = "" if not spends else f""", spent AS (
    UPDATE {TYPE} ty SET tokens = b.tokens_now - (
            SELECT count(*) FROM leased l WHERE l.type_id = b.id),
        tokens_at = GREATEST(STATEMENT_TIMESTAMP(), coalesce(b.tokens_at, STATEMENT_TIMESTAMP()))
    FROM bucket b WHERE ty.id = b.id AND b.locked AND b.rate IS NOT NULL
        AND EXISTS (SELECT 1 FROM leased l WHERE l.type_id = b.id)
)"""
    return f"""{_KINDS_AND_ALIVE}{picked}
ranked AS (
    SELECT instance_id, row_number() OVER ({CLAIM_ORDER_SQL}) <= %(start)s AS starts
    FROM picked
), scheduled AS (
    UPDATE {INSTANCE} i
    SET status = CASE WHEN ranked.starts THEN '{Status.RUNNING}' ELSE '{Status.SCHEDULED}' END,
        started = CASE WHEN ranked.starts THEN STATEMENT_TIMESTAMP() ELSE i.started END,
        attempt = i.attempt + 1, daemon_id = %(daemon)s, updated = STATEMENT_TIMESTAMP()
    FROM ranked WHERE i.id = ranked.instance_id AND {one_of("i.status", sources_of(Status.SCHEDULED))}
    RETURNING {columns(Instance, "i")}
), leased AS (
    UPDATE {TASK} t SET daemon_id = %(daemon)s, claimed = STATEMENT_TIMESTAMP(),
        deadline = STATEMENT_TIMESTAMP() + ty.timeout
    FROM scheduled s, {TYPE} ty WHERE t.instance_id = s.id AND ty.id = t.type_id
    RETURNING t.instance_id, t.priority, t.not_before, t.type_id
), logged AS (
    {LOG_COLUMNS}
    SELECT id, STATEMENT_TIMESTAMP(), '{Status.SCHEDULED}', attempt, '', %(label)s, ''
    FROM scheduled
    UNION ALL
    SELECT id, STATEMENT_TIMESTAMP(), '{Status.RUNNING}', attempt, '', %(label)s, ''
    FROM scheduled WHERE status = '{Status.RUNNING}'
){spent}
"""


CLAIM_STEPS = _claim_steps(_PICKED)

def _claim_result(settled):
    """Return the claim's result: one row per task claimed (or one of NULLs), each with the
    claim's facts: the daemon alive, a limited type met, stray rows, and ``settled``."""
    return f"""
SELECT meta.alive, meta.limited, meta.strays, meta.settled, {columns(Instance, "s")},
    {columns(Type, "ty")}, {columns(Inputs, "inp")}
FROM (
    SELECT (SELECT count(*) FROM alive) AS alive, (SELECT count(*) FROM limited) AS limited,
        (SELECT array_agg(instance_id) FROM picked
         WHERE instance_id NOT IN (SELECT id FROM scheduled)) AS strays,
        {settled} AS settled
) AS meta
LEFT JOIN (scheduled s JOIN {TYPE} ty ON ty.id = s.type_id JOIN leased l ON l.instance_id = s.id
           LEFT JOIN {INPUTS} inp ON inp.instance_id = s.id AND %(inputs)s)
    ON true
ORDER BY l.priority DESC, l.not_before, s.id
"""


CLAIM = f"WITH {CLAIM_STEPS}\n{_claim_result('NULL::bigint[]')}"
CLAIM_WITHIN_LIMITS = (f"WITH {_claim_steps(_picked_within_limits(None), spends=True)}\n"
                       f"{_claim_result('NULL::bigint[]')}")


#: Planner settings for the claim's transaction: the only plan left is a walk of the
#: claim index in claim order, which stops after ``limit`` rows. Chosen by cost, a
#: table whose statistics are missing or stale (never analyzed, or analyzed while
#: nearly empty before a burst of enqueues) is claimed with a bitmap scan and a sort
#: of every waiting row: 30 times slower with 100,000 of them. The penalty the
#: planner adds to a disabled plan would make the claim look expensive enough to be
#: compiled (JIT) on every run, hundreds of milliseconds each: JIT is off too.
#: A claim prepared on the server (``statement_cursor``) is planned once, under these
#: settings, and its plan kept for the connection (``plan_cache_mode``): planned anew
#: each time, as PostgreSQL would choose, it spends 2 ms planning for 0.4 ms running.
CLAIM_PLAN = ("SELECT set_config('enable_seqscan', 'off', true), "
              "set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true), "
              "set_config('jit', 'off', true), "
              "set_config('plan_cache_mode', 'force_generic_plan', true)")

#: What the claim within limits runs first, in a statement of its own: ``CLAIM_PLAN``'s
#: planner settings, and the locks of the daemon's row, then of its limited types' rows
#: (NO KEY UPDATE: claims of those types wait for each other, while enqueues, which
#: only take KEY SHARE, go on).
LOCK_LIMITED = f"""
WITH alive AS (
    SELECT id FROM {DAEMON} WHERE id = %(daemon)s AND stopped IS NULL FOR KEY SHARE
), locked AS (
    SELECT id FROM {TYPE}
    WHERE id = ANY(%(types)s::bigint[]) AND NOT is_paused AND NOT pull
        AND (max_concurrency IS NOT NULL OR rate IS NOT NULL) AND EXISTS (SELECT 1 FROM alive)
    ORDER BY id FOR NO KEY UPDATE
)
{CLAIM_PLAN},
    set_config('atp.locked_types', (SELECT coalesce(string_agg(id::text, ','), '') FROM locked), true)
"""


#: psycopg's ``prepare_threshold`` where Django left None (never prepare): statements
#: are then prepared only when they ask, as the engine's do.
ONLY_WHEN_ASKED = 2**31 - 1
_preparing = {}


def statement_cursor(connection):
    """Return a cursor for the engine's statements: with ``ATP_PREPARED_STATEMENTS`` (and
    psycopg 3) each is prepared on the server at its first run on a connection, and
    not planned again. Django's own queries keep their client-side binding."""
    cursor_class = _preparing_cursor_class() if conf.PREPARED_STATEMENTS else None
    if cursor_class is None:
        return connection.cursor()
    connection.ensure_connection()
    raw = connection.connection
    if raw.prepare_threshold is None:
        raw.prepare_threshold = ONLY_WHEN_ASKED
    with connection.wrap_database_errors:
        return connection._prepare_cursor(cursor_class(raw))


def _preparing_cursor_class():
    if "class" not in _preparing:
        try:
            from django.db.backends.postgresql.base import ServerBindingCursor
        except ImportError:  # psycopg2: nothing is prepared
            _preparing["class"] = None
        else:
            class PreparingCursor(ServerBindingCursor):
                """Binds on the server and has each statement prepared."""

                def execute(self, query, params=None, *, prepare=True, **options):
                    return super().execute(query, params, prepare=prepare, **options)

            _preparing["class"] = PreparingCursor
    return _preparing["class"]


def execute_claim(cursor, sql, params, *, within_limits=False):
    """Execute ``sql`` (a claim, or its EXPLAIN) under ``CLAIM_PLAN`` (with ``LOCK_LIMITED``'s
    locks when it claims ``within_limits``): in one round trip where the cursor binds on the
    client (each statement of the string still reads the database as it is when that
    statement begins), else as statements of the caller's transaction."""
    statements = [LOCK_LIMITED if within_limits else CLAIM_PLAN, sql]
    if _binds_on_the_client(cursor):
        cursor.execute("; ".join(statements), params)
        cursor.nextset()  # to the claim's own result
    else:  # server-side binding takes one statement at a time
        first, _ = statements
        cursor.execute(first, params if within_limits else None)
        cursor.execute(sql, params)


def _binds_on_the_client(cursor):
    try:
        import psycopg
    except ImportError:  # psycopg2
        return False
    return isinstance(cursor.cursor, psycopg.ClientCursor)


def with_limit(sql, limit):
    """Return the claim ``sql`` taking ``limit`` rows, written in the statement.

    Prepared with the limit as a parameter, the plan PostgreSQL keeps expects a tenth
    of the waiting rows to be claimed, and starts the tasks claimed by hashing every
    ACCEPTED task: 20 ms a claim with 30,000 waiting. A claim takes few rows (about
    as many as a daemon has workers): one prepared statement per limit is cheap.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"a claim's limit is a non-negative integer, not {limit!r}")
    return sql.replace("LIMIT %(limit)s", f"LIMIT {limit}")


def claim_parameters(daemon, limit, type_ids, start=0, inputs=False):
    """Return the parameters of ``CLAIM``; ``limit`` is written in the statement itself
    (``with_limit``), and kept here for a statement that binds it."""
    return {"types": list(type_ids), "limit": limit, "daemon": daemon.pk,
            "label": daemon_label(daemon), "start": check_start(start), "inputs": inputs}


def claim(daemon, limit, type_ids, start=0, inputs=False, limited=False):
    """Lease and schedule up to ``limit`` runnable tasks of the types ``type_ids``, within
    their concurrency limits; return ``(instances, strays)``.

    The first ``start`` tasks in claim order are started too (RUNNING, after their
    SCHEDULED history entry). With ``inputs`` they come with their inputs. ``limited``
    says one of the types was last seen with a concurrency limit: the claim within
    limits is run at once (otherwise only once the plain claim met one). Raise
    ``DaemonStopped`` when ``daemon`` was declared stopped.
    """
    params = claim_parameters(daemon, limit, type_ids, start, inputs)
    if not limited:
        _, claimed = _claim(with_limit(CLAIM, limit), params, daemon, inputs)
        if claimed is not None:
            return claimed
    _, claimed = _claim(with_limit(CLAIM_WITHIN_LIMITS, limit), params, daemon, inputs,
                        within_limits=True)
    return claimed


def settle_and_claim(daemon, outcomes, limit, type_ids, start, limited=False):
    """``settle`` then ``claim`` (starting ``start`` tasks, all with their inputs) in one
    statement, one commit; return ``(keys of the tasks settled, what claim returns)``.

    With ``limited`` (see ``claim``) the statement claims within limits, after
    ``LOCK_LIMITED``, in one transaction. Without it, a limited type met claims nothing
    and the claim is None: the settle is written, and the caller claims (``claim``).
    ``DaemonStopped`` leaves the settle written.
    """
    params = {**settle_parameters(daemon, outcomes),
              **claim_parameters(daemon, limit, type_ids, start, inputs=True)}
    if limited:
        return _claim(with_limit(SETTLE_AND_CLAIM_WITHIN_LIMITS, limit), params, daemon, True,
                      within_limits=True)
    return _claim(with_limit(SETTLE_AND_CLAIM, limit), params, daemon, True)


def _claim(sql, params, daemon, inputs, within_limits=False):
    connection = connections[database()]
    with statement_cursor(connection) as cursor:
        if connection.in_atomic_block or _binds_on_the_client(cursor):
            execute_claim(cursor, sql, params, within_limits=within_limits)
            rows = cursor.fetchall()
        else:  # CLAIM_PLAN (and LOCK_LIMITED) and the claim must share a transaction
            with transaction.atomic(using=connection.alias):
                execute_claim(cursor, sql, params, within_limits=within_limits)
                rows = cursor.fetchall()
    alive, limited, strays, settled = rows[0][:4]
    settled = set(settled or ())
    if not alive:
        raise DaemonStopped(f"daemon {daemon} was declared stopped; it claims nothing")
    if limited:
        return settled, None
    instances, types = [], {}
    for row in rows:
        if row[4] is None:
            continue
        row = row[4:]
        instance = build(Instance, row[:INSTANCE_WIDTH])
        if instance.type_id not in types:  # one object per type of the claim
            types[instance.type_id] = build(Type, row[INSTANCE_WIDTH:INSTANCE_WIDTH + TYPE_WIDTH])
        instance.type = types[instance.type_id]
        if inputs:
            instance.inputs = build(Inputs, row[INSTANCE_WIDTH + TYPE_WIDTH:])
        instances.append(instance)
    return settled, (instances, strays or [])


# The earliest time a waiting task of ``%(types)s`` becomes runnable within the next
# ``%(within)s`` seconds, in seconds from now (None: none). The bound keeps the walk short
# when many tasks of other types, or paused ones, wait for a later time. The claim index is ordered by priority first:
# the statement walks its distinct priorities (a recursive skip scan, each step one
# index probe) and takes, within each, the first ``not_before`` to come.
NEXT_DUE = f"""
WITH RECURSIVE levels(priority) AS (
    (SELECT priority FROM {TASK} WHERE daemon_id IS NULL ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT t.priority FROM {TASK} t WHERE t.daemon_id IS NULL AND t.priority < l.priority
            ORDER BY t.priority DESC LIMIT 1)
    FROM levels l WHERE l.priority IS NOT NULL
)
SELECT EXTRACT(EPOCH FROM min((
    SELECT t.not_before FROM {TASK} t
    WHERE t.daemon_id IS NULL AND t.priority = l.priority
        AND t.not_before > STATEMENT_TIMESTAMP()
        AND t.not_before < STATEMENT_TIMESTAMP() + make_interval(secs => %(within)s)
        AND t.paused_since IS NULL
        AND t.type_id = ANY(%(types)s::bigint[])
    ORDER BY t.not_before LIMIT 1)) - STATEMENT_TIMESTAMP())
FROM levels l WHERE l.priority IS NOT NULL
"""


def next_due(type_ids, within):
    """Return in how many seconds the first task of ``type_ids`` waiting for its time
    (``eta``, ``countdown``, a retry's backoff) becomes runnable, if within ``within``
    seconds; else None."""
    connection = connections[database()]
    params = {"types": list(type_ids), "within": float(within)}
    with statement_cursor(connection) as cursor:
        if connection.in_atomic_block or _binds_on_the_client(cursor):
            execute_claim(cursor, NEXT_DUE, params)
            row = cursor.fetchone()
        else:  # CLAIM_PLAN and the statement must share a transaction
            with transaction.atomic(using=connection.alias):
                execute_claim(cursor, NEXT_DUE, params)
                row = cursor.fetchone()
    return None if row is None or row[0] is None else max(0.0, float(row[0]))


START = f"""
WITH started AS (
    UPDATE {INSTANCE} i
    SET status = '{Status.RUNNING}', started = STATEMENT_TIMESTAMP(), updated = STATEMENT_TIMESTAMP()
    WHERE i.id = %(pk)s AND i.status = '{Status.SCHEDULED}' AND i.attempt = %(attempt)s
    RETURNING {columns(Instance, "i")}
), logged AS (
    {LOG_COLUMNS}
    SELECT id, STATEMENT_TIMESTAMP(), '{Status.RUNNING}', attempt, '', %(label)s, ''
    FROM started
)
SELECT {columns(Instance, "s")}, {columns(Type, "ty")}, {columns(Inputs, "inp")}
FROM started s JOIN {TYPE} ty ON ty.id = s.type_id JOIN {INPUTS} inp ON inp.instance_id = s.id
"""


def start(pk, attempt, daemon):
    """Move attempt ``attempt`` of task ``pk`` to RUNNING; return the task with its type and inputs.

    Raise ``InvalidTransition`` (or ``AttemptSuperseded``) when it is not SCHEDULED on
    that attempt; nothing is written then.
    """
    with statement_cursor(connections[database()]) as cursor:
        cursor.execute(START, {"pk": pk, "attempt": attempt, "label": daemon_label(daemon)})
        row = cursor.fetchone()
    if row is None:
        raise refusal(pk, Status.RUNNING, attempt=attempt)
    instance = build(Instance, row[:INSTANCE_WIDTH])
    instance.type = build(Type, row[INSTANCE_WIDTH:INSTANCE_WIDTH + TYPE_WIDTH])
    instance.inputs = build(Inputs, row[INSTANCE_WIDTH + TYPE_WIDTH:])
    return instance


# The queue row is locked first (the order of ``atp.engine.locks``) and deleted only
# once the task's own row matched: refused, the statement writes nothing (it runs in
# autocommit mode, with no transaction to roll back).
FINISH = f"""
WITH leased AS (
    SELECT instance_id FROM {TASK} WHERE instance_id = %(pk)s AND daemon_id IS NOT NULL
    FOR UPDATE
), finished AS (
    UPDATE {INSTANCE} i
    SET status = '{Status.FINISHED}', finished = STATEMENT_TIMESTAMP(), updated = STATEMENT_TIMESTAMP()
    FROM leased WHERE i.id = leased.instance_id AND i.attempt = %(attempt)s
        AND {one_of("i.status", sources_of(Status.FINISHED))}
    RETURNING i.id, i.attempt
), dequeued AS (
    DELETE FROM {TASK} WHERE instance_id IN (SELECT id FROM finished)
), logged AS (
    {LOG_COLUMNS}
    SELECT id, STATEMENT_TIMESTAMP(), '{Status.FINISHED}', attempt, %(message)s, %(label)s, ''
    FROM finished
), stored AS (
    INSERT INTO {RESPONSE} (instance_id, data, content_type, charset, size, stored)
    SELECT id, %(data)s, %(content_type)s, %(charset)s, %(size)s, STATEMENT_TIMESTAMP()
    FROM finished WHERE %(has_response)s
    ON CONFLICT (instance_id) DO UPDATE SET data = EXCLUDED.data,
        content_type = EXCLUDED.content_type, charset = EXCLUDED.charset,
        size = EXCLUDED.size, stored = EXCLUDED.stored
)
SELECT attempt FROM finished
"""


def finish(pk, attempt, message, daemon, response, content_type):
    """Move attempt ``attempt`` of task ``pk`` to FINISHED with its response; return the attempt.

    Raise ``InvalidResponse`` before writing for a response that cannot be stored, and
    ``InvalidTransition`` when the task is not running on that attempt.
    """
    stored = (None, "", "") if response is None else encode_response(
        response, content_type, max_bytes=response_limit(pk))
    data, content_type, charset = stored
    with statement_cursor(connections[database()]) as cursor:
        cursor.execute(FINISH, {
            "pk": pk, "attempt": attempt, "message": message, "label": daemon_label(daemon),
            "has_response": response is not None, "data": data, "content_type": content_type,
            "charset": charset, "size": len(data or b""),
        })
        row = cursor.fetchone()
    if row is None:
        raise refusal(pk, Status.FINISHED, attempt=attempt)
    return row[0]


# The ends of many attempts, one row each in ``batch``. Each is the one of ``FINISH``
# (or its FAILED twin): the queue rows locked first, in key order, and only an
# attempt that still holds its lease and may move to its state is written; the
# others are left as they are, and missing from what the statement returns. A row
# with ``started_ago`` is an attempt whose start was not known to be written: it moves
# from SCHEDULED, through RUNNING (its history entry dated when it started, never before
# its claim), to its end, or only to RUNNING when it has not ended; found RUNNING (its
# start was written by a round whose answer was lost), it only ends. The task rows are
# locked (``prior``) to read the state they are in, the queue rows' lock held.
SETTLE_STEPS = f"""
batch AS (
    SELECT * FROM unnest(%(pks)s::bigint[], %(attempts)s::bigint[], %(states)s::text[],
        %(messages)s::text[], %(data)s::bytea[], %(content_types)s::text[], %(charsets)s::text[],
        %(started_agos)s::float8[])
    AS b(pk, attempt, status, message, data, content_type, charset, started_ago)
), held AS (
    SELECT instance_id, claimed FROM {TASK}
    WHERE instance_id = ANY(%(pks)s::bigint[]) AND daemon_id IS NOT NULL
    ORDER BY instance_id FOR UPDATE
), prior AS (
    SELECT id, status = '{Status.SCHEDULED}' AS unstarted FROM {INSTANCE}
    WHERE id = ANY(%(pks)s::bigint[]) AND id IN (SELECT instance_id FROM held)
    ORDER BY id FOR NO KEY UPDATE
), ended AS (
    UPDATE {INSTANCE} i
    SET status = b.status, updated = STATEMENT_TIMESTAMP(),
        started = CASE WHEN b.started_ago IS NOT NULL AND p.unstarted THEN GREATEST(
            held.claimed, STATEMENT_TIMESTAMP() - make_interval(secs => b.started_ago))
            ELSE i.started END,
        finished = CASE WHEN b.status = '{Status.RUNNING}' THEN i.finished
            ELSE STATEMENT_TIMESTAMP() END
    FROM held, batch b, prior p
    WHERE i.id = held.instance_id AND b.pk = i.id AND p.id = i.id AND i.attempt = b.attempt AND (
        (b.started_ago IS NOT NULL AND i.status = '{Status.SCHEDULED}'
         AND b.status IN ('{Status.RUNNING}', '{Status.FINISHED}', '{Status.FAILED}'))
        OR (b.status = '{Status.FINISHED}' AND {one_of("i.status", sources_of(Status.FINISHED))})
        OR (b.status = '{Status.FAILED}' AND {one_of("i.status", sources_of(Status.FAILED))}))
    RETURNING i.id, i.type_id, i.attempt, i.status, i.started,
        b.started_ago IS NOT NULL AND p.unstarted AS starts
), dequeued AS (
    DELETE FROM {TASK} WHERE instance_id IN (SELECT id FROM ended WHERE status <> '{Status.RUNNING}')
), ended_logged AS (
    {LOG_COLUMNS}
    SELECT id, time, status, attempt, message, %(label)s, '' FROM (
        SELECT e.id, 0 AS step, e.started AS time, '{Status.RUNNING}' AS status, e.attempt,
            '' AS message
        FROM ended e WHERE e.starts
        UNION ALL
        SELECT e.id, 1, STATEMENT_TIMESTAMP(), e.status, e.attempt, b.message
        FROM ended e JOIN batch b ON b.pk = e.id WHERE e.status <> '{Status.RUNNING}'
    ) AS entries ORDER BY id, step
), stored AS (
    INSERT INTO {RESPONSE} (instance_id, data, content_type, charset, size, stored)
    SELECT e.id, b.data, b.content_type, b.charset, length(b.data), STATEMENT_TIMESTAMP()
    FROM ended e JOIN batch b ON b.pk = e.id WHERE b.data IS NOT NULL AND e.status <> '{Status.RUNNING}'
    ON CONFLICT (instance_id) DO UPDATE SET data = EXCLUDED.data,
        content_type = EXCLUDED.content_type, charset = EXCLUDED.charset,
        size = EXCLUDED.size, stored = EXCLUDED.stored
)
"""
SETTLE = f"WITH {SETTLE_STEPS}\nSELECT id FROM ended"
RELEASED = f"(SELECT type_id FROM ended WHERE status <> '{Status.RUNNING}')"
SETTLE_AND_CLAIM = (f"WITH {SETTLE_STEPS},\n{CLAIM_STEPS}\n"
                    f"{_claim_result('(SELECT array_agg(id) FROM ended)')}")
# Within limits, the leases this statement ends count no more: the count of a type's
# leases reads them as they were before the statement.
SETTLE_AND_CLAIM_WITHIN_LIMITS = (
    f"WITH {SETTLE_STEPS},\n"
    f"{_claim_steps(_picked_within_limits(RELEASED), spends=True)}\n"
    f"{_claim_result('(SELECT array_agg(id) FROM ended)')}")


def settle(daemon, outcomes):
    """Write the ends (FINISHED or FAILED ``Outcome``) and unwritten starts of many attempts
    in one statement; return the keys of the tasks written. An outcome whose attempt was
    superseded, or whose task is not in a state to move so, writes nothing."""
    with statement_cursor(connections[database()]) as cursor:
        cursor.execute(SETTLE, settle_parameters(daemon, outcomes))
        return {row[0] for row in cursor.fetchall()}


def settle_parameters(daemon, outcomes):
    outcomes = list(outcomes)
    responses = [outcome.response or (None, "", "") for outcome in outcomes]
    return {
        "pks": [outcome.pk for outcome in outcomes],
        "attempts": [outcome.attempt for outcome in outcomes],
        "states": [str(outcome.status) for outcome in outcomes],
        "messages": [outcome.message for outcome in outcomes],
        "data": [data for data, _, _ in responses],
        "content_types": [content_type for _, content_type, _ in responses],
        "charsets": [charset for _, _, charset in responses],
        "started_agos": [outcome.started_ago for outcome in outcomes],
        "label": daemon_label(daemon),
    }


def _insert(model, obj, connection, expressions):
    """Return ``INSERT INTO table (columns) SELECT values`` for ``obj``, and its parameters.

    ``expressions`` maps columns to SQL (or ``(SQL, parameters)``) put in place of
    ``obj``'s values; an automatic primary key is left to the database.
    """
    columns, values, params = [], [], []
    for field in stored_fields(model):
        columns.append(field.column)
        expression = expressions.get(field.column)
        if expression is None:
            values.append("%s")
            params.append(field.get_db_prep_save(getattr(obj, field.attname), connection))
        elif isinstance(expression, tuple):
            values.append(expression[0])
            params += expression[1]
        else:
            values.append(expression)
    sql = f"INSERT INTO {model._meta.db_table} ({', '.join(columns)}) SELECT {', '.join(values)}"
    return sql, params


def _not_before(value):
    """Return the SQL of a queue row's ``not_before``: a datetime, or a delay from its creation."""
    if isinstance(value, datetime.datetime):
        return ("%s", [value])
    return ("new.created + %s", [value])


def enqueue(task_type, instance, data, not_before, size, notify):
    """Write one task (its instance, queue row, inputs and first history entry) in one
    statement, and NOTIFY in the same round trip; return the task's key and creation
    time, or None when ``task_type`` changed since it was read (read it again then).

    ``instance`` is the unsaved ``Instance``; ``not_before`` a delay (timedelta, from
    the statement's time) or a datetime. Raise ``IntegrityError`` for a live duplicate.
    """
    connection = connections[database()]
    task = Task(type=task_type, identifier=instance.identifier, priority=instance.priority,
                tag=instance.tag)
    inputs = Inputs(input_format=task_type.input_format, data=data)
    record = LogRecord(status=Status.ACCEPTED, message="enqueued")
    now = "STATEMENT_TIMESTAMP()"
    parts = [
        type_as_read(task_type, size, instance.named),
        _insert(Instance, instance, connection, {"created": now, "updated": now}),
        _insert(Task, task, connection, {"instance_id": "new.id", "enqueued": "new.created",
                                         "not_before": _not_before(not_before)}),
        _insert(Inputs, inputs, connection, {"instance_id": "new.id"}),
        _insert(LogRecord, record, connection, {"instance_id": "new.id", "time": "new.created"}),
    ]
    kind, new, queued, stored, logged = (sql for sql, _ in parts)
    params = [param for _, part_params in parts for param in part_params]
    sql = (
        f"WITH kind AS ({kind}), new AS ({new} FROM kind RETURNING id, created), "
        f"queued AS ({queued} FROM new), stored AS ({stored} FROM new), "
        f"logged AS ({logged} FROM new) SELECT id, created FROM new"
    )
    with connection.cursor() as cursor:
        if notify and _binds_on_the_client(cursor):
            cursor.execute(f"{sql}; NOTIFY {QUEUE_CHANNEL}", params)
            row = cursor.fetchone()
        else:
            cursor.execute(sql, params)
            row = cursor.fetchone()
            if notify and row is not None:
                cursor.execute(f"NOTIFY {QUEUE_CHANNEL}")
    return row


def enqueue_many(task_type, identifiers, data, priority, not_before, notify, tag=None,
                 named=False):
    """Write many tasks of ``task_type`` in one statement: the rows of each table come
    from arrays (``unnest``), so the cost per task is the database's, not the ORM's.
    ``named``: the identifiers were given, not drawn.

    Return ``(key, identifier, creation time)`` per task, or None when ``task_type``
    changed since it was read. Raise ``IntegrityError`` for a live duplicate.
    """
    connection = connections[database()]
    template = Instance(type=task_type, identifier="", priority=priority, named=named,
                        batch_id=current_batch_id(), tag=tag)
    task = Task(type=task_type, identifier="", priority=priority, tag=tag)
    inputs = Inputs(input_format=task_type.input_format, data="")
    record = LogRecord(status=Status.ACCEPTED, message="enqueued")
    now = "STATEMENT_TIMESTAMP()"
    size = max((len(item.encode("utf-8")) for item in data), default=0)
    parts = [
        type_as_read(task_type, size, named),
        _insert(Instance, template, connection,
                {"created": now, "updated": now, "identifier": "batch.identifier"}),
        _insert(Task, task, connection, {"instance_id": "new.id", "enqueued": "new.created",
                                         "not_before": _not_before(not_before), "identifier": "new.identifier"}),
        _insert(Inputs, inputs, connection, {"instance_id": "new.id", "data": "batch.data"}),
        _insert(LogRecord, record, connection, {"instance_id": "new.id", "time": "new.created"}),
    ]
    kind, new, queued, stored, logged = (sql for sql, _ in parts)
    kind_params, new_params, queued_params, stored_params, logged_params = (
        part_params for _, part_params in parts)
    sql = (
        f"WITH kind AS ({kind}), "
        "batch AS (SELECT * FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY "
        "AS b(identifier, data, position)), "
        f"new AS ({new} FROM kind, batch ORDER BY batch.position "
        "RETURNING id, identifier, created), "
        f"queued AS ({queued} FROM new), "
        f"stored AS ({stored} FROM new JOIN batch USING (identifier)), "
        # One creation time for all (the statement's): loading it costs more than the
        # rest of a row.
        f"logged AS ({logged} FROM new) "
        "SELECT id, identifier, CASE WHEN row_number() OVER () = 1 THEN created END FROM new"
    )
    params = [*kind_params, identifiers, data, *new_params, *queued_params,
              *stored_params, *logged_params]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
        if not rows:
            return None
        if notify:
            cursor.execute(f"NOTIFY {QUEUE_CHANNEL}")
    created = next(created for _, _, created in rows if created is not None)
    return [(pk, identifier, created) for pk, identifier, _ in rows]


class PostgreSQLEngine(StatementsEngine):
    """Each verb one statement (data-modifying common table expressions), prepared once
    per connection; a claim within limits locks the limited types first."""

    name = "postgresql"
    one_statement = ONE_STATEMENT
    statements = sys.modules[__name__]

    def claim(self, daemon, limit, type_ids, *, start=0, inputs=False, limited=False):
        return self.transaction(lambda: claim(daemon, limit, type_ids, start, inputs, limited))

    def settle_and_claim(self, daemon, outcomes, limit, type_ids, *, start, limited=False):
        settled, claimed = self.transaction(
            lambda: settle_and_claim(daemon, outcomes, limit, type_ids, start, limited))
        if claimed is None:  # it met a type with a limit: claim within limits
            claimed = self.claim(daemon, limit, type_ids, start=start, inputs=True, limited=True)
        return settled, claimed
