"""The verbs every task goes through, as one SQL statement each on PostgreSQL.

A drained queue costs a claim, a start and a finish per task. Written with the ORM
they take 3 to 6 statements each, and the daemon's time goes to round trips and query
compilation. On PostgreSQL each is a single statement of data-modifying common table
expressions, run in the same queue transaction, with the same guards, the same history
and the same locking order (queue row before task row) as the portable engine
(``orm``) and the operators' verbs. So is a single enqueue, which wakes the daemons
itself (``pg_notify``). ``PostgreSQLEngine`` implements the contract
(``atp.engine.contract``); the test suite runs on it and on the ``orm`` engine, held to
the same behaviour.

The statements are in ``atp/engine/statements/postgresql.sql``, each named and whole,
with what explains them; this module binds their parameters and reads their rows.
"""

import datetime
import sys
from contextlib import contextmanager

from django.db import connections, transaction

from atp.conf import conf
from atp.engine import statements
from atp.engine.base import daemon_label, database
from atp.engine.batches import current_batch_id
from atp.engine.records import log_refusal, progress_refusal, response_limit
from atp.engine.sql import (
    StatementsEngine,
    attach,
    build,
    builder,
    check_start,
    stored_fields,
    width,
)
from atp.engine.transitions import refusal
from atp.exceptions import DaemonStopped
from atp.models import Inputs, Instance, Type
from atp.rates import DEFAULT_BUCKET_SIZE
from atp.serialization import encode_response
from atp.states import Status

INSTANCE_WIDTH = width(Instance)
TYPE_WIDTH = width(Type)

#: An engine whose verbs are one statement each: they run in autocommit mode (one round
#: trip), or in a savepoint of the caller's transaction.
ONE_STATEMENT = True

#: The engine's statements, by name (``atp/engine/statements/postgresql.sql``).
SQL = statements.load("postgresql")
#: The planner settings under which the ORM's walks of the claim index run on PostgreSQL
#: (``atp.engine.databases``); the engine's claims run ``bound_claim_plan``.
CLAIM_PLAN = SQL["claim_plan"]


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
        cursor = connection.cursor()
    else:
        connection.ensure_connection()
        raw = connection.connection
        if raw.prepare_threshold is None:
            raw.prepare_threshold = ONLY_WHEN_ASKED
        with connection.wrap_database_errors:
            cursor = connection._prepare_cursor(cursor_class(raw))
    _load_times_in_c(connection, cursor)
    return cursor


def _load_times_in_c(connection, cursor):
    """Have ``cursor`` read ``timestamptz`` values with psycopg's own loader (in C) when
    it reads them as Django does: Django's loader parses them in Python to set the time
    zone it reads them in (3.4 µs a value against 0.2 here, four or more of them a task
    claimed). Both give the same datetimes where Django reads them in
    ``datetime.timezone.utc`` (time zone support on, no ``TIME_ZONE`` for the database:
    the session's is then UTC); with a database ``TIME_ZONE`` of "UTC" Django's carry
    ``ZoneInfo("UTC")`` instead, and its loader stays."""
    adapters = getattr(cursor.cursor, "adapters", None)  # psycopg 3
    if adapters is None or connection.timezone is not datetime.UTC:
        return
    from psycopg import adapters as psycopg_adapters
    from psycopg import postgres, pq

    oid = postgres.types["timestamptz"].oid
    adapters.register_loader(oid, psycopg_adapters.get_loader(oid, pq.Format.TEXT))


def _preparing_cursor_class():
    if "class" not in _preparing:
        try:
            from psycopg import RawCursor
            from psycopg.types.array import ListBinaryDumper
        except ImportError:  # psycopg2: nothing is prepared
            _preparing["class"] = None
        else:
            class PreparingCursor(RawCursor):
                """Binds on the server and has each statement prepared; takes the engine's
                statements with the driver's placeholders and sends them numbered
                (``statements.numbered``), lists binary (as ``%(name)b`` asks)."""

                def __init__(self, *args, **kwargs):
                    super().__init__(*args, **kwargs)
                    self.adapters.register_dumper(list, ListBinaryDumper)

                def execute(self, query, params=None, *, prepare=True, **options):
                    if params is not None:
                        query, names = statements.numbered(query)
                        if names is not None:
                            params = [params[name] for name in names]
                    return super().execute(query, params, prepare=prepare, **options)

                def executemany(self, query, params_seq, **options):
                    query, names = statements.numbered(query)
                    if names is not None:
                        params_seq = [[params[name] for name in names] for params in params_seq]
                    return super().executemany(query, params_seq, **options)

            _preparing["class"] = PreparingCursor
    return _preparing["class"]


def execute_claim(cursor, sql, params, *, within_limits=False):
    """Execute ``sql`` (a claim, a settle, or its EXPLAIN) after ``lock_round``: the planner
    settings of ``bound_claim_plan``, the daemon's row locked, with ``within_limits`` its
    limited types', and the rows of the attempts to settle (``pks``). A plain claim, which
    locks the daemon's row itself, runs after ``bound_claim_plan`` alone (the cheaper
    statement: an idle daemon's claim of one task waits for it). In one string where the
    cursor binds on the client (each statement of the string still reads the database as
    it is when that statement begins), else as statements of the caller's transaction
    (``_together``)."""
    if not (within_limits or params.get("pks")):
        return _execute_after(cursor, SQL["bound_claim_plan"], sql, params)
    params = {"pks": [], "types": [], **params, "within_limits": within_limits}
    return _execute_after(cursor, SQL["lock_round"], sql, params)


def execute_planned(cursor, sql, params):
    """Execute ``sql`` (a read of the claim index, or its EXPLAIN) under ``bound_claim_plan``,
    as ``execute_claim`` does after ``lock_round``."""
    _execute_after(cursor, SQL["bound_claim_plan"], sql, params)


def _execute_after(cursor, first, sql, params):
    if _binds_on_the_client(cursor):
        cursor.execute(f"{first}; {sql}", params)
        cursor.nextset()  # to the statement's own result
    else:  # server-side binding takes one statement at a time
        cursor.execute(first, params)
        cursor.execute(sql, params)


def _binds_on_the_client(cursor):
    try:
        import psycopg
    except ImportError:  # psycopg2
        return False
    return isinstance(cursor.cursor, psycopg.ClientCursor)


def claim_parameters(daemon, limit, type_ids, start=0, inputs=False):
    """Return the parameters of the claims; raise ``ValueError`` for a ``limit`` or a
    ``start`` that is not a count."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"a claim's limit is a non-negative integer, not {limit!r}")
    return {"types": list(type_ids), "limit": limit, "daemon": daemon.pk,
            "label": daemon_label(daemon), "start": check_start(start), "inputs": inputs,
            "default_bucket_size": DEFAULT_BUCKET_SIZE}


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
        _, claimed = _claim(SQL["claim"], params, daemon, inputs)
        if claimed is not None:
            return claimed
    _, claimed = _claim(SQL["claim_within_limits"], params, daemon, inputs,
                        within_limits=True)
    return claimed


def settle_and_claim(daemon, outcomes, limit, type_ids, start, limited=False):
    """``settle`` then ``claim`` (starting ``start`` tasks, all with their inputs) in one
    statement, one commit; return ``(keys of the tasks settled, what claim returns)``.

    With ``limited`` (see ``claim``) the statement claims within limits, after
    ``lock_round``, in one transaction. Without it, a limited type met claims nothing
    and the claim is None: the settle is written, and the caller claims (``claim``).
    ``DaemonStopped`` leaves the settle written.
    """
    params = {**settle_parameters(daemon, outcomes),
              **claim_parameters(daemon, limit, type_ids, start, inputs=True)}
    if limited:
        return _claim(SQL["settle_and_claim_within_limits"], params, daemon, True,
                      within_limits=True)
    return _claim(SQL["settle_and_claim"], params, daemon, True)


def lease_keys(daemon, keys, type_ids, start=0, inputs=False):
    """Lease and schedule the waiting tasks ``keys`` (of the types ``type_ids``), chosen and
    locked in this transaction by the gated claim (``atp.engine.semaphores``); start the
    first ``start``; return ``(instances in the order of keys, strays)``: the second
    half of ``claim``, one statement."""
    params = {"keys": list(keys), "start": check_start(start), "daemon": daemon.pk,
              "label": daemon_label(daemon), "inputs": inputs}
    _, claimed = _claim(SQL["lease_keys"], params, daemon, inputs)
    return claimed


def _claim(sql, params, daemon, inputs, within_limits=False):
    rows = _locked_round(sql, params, within_limits)
    alive, limited = rows[0][:2]
    # On one row of the result, whichever (see postgresql.sql): None on the others.
    strays = next((row[2] for row in rows if row[2] is not None), None)
    settled = set(next((row[3] for row in rows if row[3] is not None), ()))
    if not alive:
        raise DaemonStopped(f"daemon {daemon} was declared stopped; it claims nothing")
    if limited:
        return settled, None
    rows = [row[4:] for row in rows if row[4] is not None]
    # One object per type of the claim, from the one row of each that carries it.
    build_type, build_instance, build_inputs = builder(Type), builder(Instance), builder(Inputs)
    types = {row[INSTANCE_WIDTH]: build_type(row[INSTANCE_WIDTH:INSTANCE_WIDTH + TYPE_WIDTH])
             for row in rows if row[INSTANCE_WIDTH] is not None}
    instances = []
    for row in rows:
        instance = build_instance(row[:INSTANCE_WIDTH])
        attach(instance, type=types[instance.type_id],
               inputs=build_inputs(row[INSTANCE_WIDTH + TYPE_WIDTH:]) if inputs else None)
        instances.append(instance)
    return settled, (instances, strays or [])


def _locked_round(sql, params, within_limits=False):
    """Run ``sql`` after ``lock_round`` in one transaction (the caller's, or one of its
    own); return its rows."""
    connection = connections[database()]
    with statement_cursor(connection) as cursor:
        with _together(connection, cursor):
            execute_claim(cursor, sql, params, within_limits=within_limits)
        return cursor.fetchall()


def next_due(type_ids, within):
    """Return in how many seconds the first task of ``type_ids`` waiting for its time
    (``eta``, ``countdown``, a retry's backoff) becomes runnable, if within ``within``
    seconds; else None."""
    connection = connections[database()]
    params = {"types": list(type_ids), "within": float(within)}
    with statement_cursor(connection) as cursor:
        with _together(connection, cursor):
            execute_planned(cursor, SQL["next_due"], params)
        row = cursor.fetchone()
    return None if row is None or row[0] is None else max(0.0, float(row[0]))


@contextmanager
def _together(connection, cursor):
    """Have the statements run in the block (a statement that sets the planner or takes
    the locks, then the one it prepares) share a transaction, in one round trip where
    the cursor allows: the caller's transaction, or one string where the cursor binds on
    the client (``_execute_after``); else psycopg's pipeline mode, where the statements
    go out together with one Sync and the server runs what comes before it as one
    transaction, committed at the Sync (no BEGIN, no COMMIT: a lone claim or settle of
    an idle daemon waits for one answer, not four); else BEGIN and COMMIT. The block
    only executes: its rows are read after it."""
    if connection.in_atomic_block or _binds_on_the_client(cursor):
        yield
    elif _pipelines(connection):
        with connection.wrap_database_errors, connection.connection.pipeline():
            yield
    else:
        with transaction.atomic(using=connection.alias):
            yield


def _pipelines(connection):
    """Whether ``connection`` (connected, in autocommit mode) can send a pipeline: psycopg
    3 over a libpq that has the mode (14 and later)."""
    if not connection.get_autocommit():
        return False
    try:
        from psycopg import Pipeline
    except ImportError:  # psycopg2
        return False
    return Pipeline.is_supported()


def start(pk, attempt, daemon):
    """Move attempt ``attempt`` of task ``pk`` to RUNNING; return the task with its type and inputs.

    Raise ``InvalidTransition`` (or ``AttemptSuperseded``) when it is not SCHEDULED on
    that attempt; nothing is written then.
    """
    with statement_cursor(connections[database()]) as cursor:
        cursor.execute(SQL["start"], {"pk": pk, "attempt": attempt, "label": daemon_label(daemon)})
        row = cursor.fetchone()
    if row is None:
        raise refusal(pk, Status.RUNNING, attempt=attempt)
    instance = build(Instance, row[:INSTANCE_WIDTH])
    instance.type = build(Type, row[INSTANCE_WIDTH:INSTANCE_WIDTH + TYPE_WIDTH])
    instance.inputs = build(Inputs, row[INSTANCE_WIDTH + TYPE_WIDTH:])
    return instance


def finish(pk, attempt, message, daemon, response, content_type):
    """Move attempt ``attempt`` of task ``pk`` to FINISHED with its response; return the attempt.

    Raise ``InvalidResponse`` before writing for a response that cannot be stored, and
    ``InvalidTransition`` when the task is not running on that attempt.
    """
    stored = (None, "", "") if response is None else encode_response(
        response, content_type, max_bytes=response_limit(pk))
    data, content_type, charset = stored
    with statement_cursor(connections[database()]) as cursor:
        cursor.execute(SQL["finish"], {
            "pk": pk, "attempt": attempt, "message": message, "label": daemon_label(daemon),
            "has_response": response is not None, "data": data, "content_type": content_type,
            "charset": charset, "size": len(data or b""),
        })
        row = cursor.fetchone()
    if row is None:
        raise refusal(pk, Status.FINISHED, attempt=attempt)
    return row[0]


def log(pk, message, attempt, label):
    """Add ``message`` to task ``pk``'s history (``Engine.log``) in one statement."""
    if not _write_one(SQL["log"], {"pk": pk, "message": message, "label": label,
                                   **_attempt_parameters(attempt)}):
        raise log_refusal(pk, attempt)


def set_progress(pk, done, total, message, attempt):
    """Record task ``pk``'s progress (``Engine.set_progress``) in one statement."""
    params = {"pk": pk, "done": _double(done), "total": _double(total), "message": message,
              **_attempt_parameters(attempt)}
    if not _write_one(SQL["set_progress"], params):
        raise progress_refusal(pk, attempt)


def _attempt_parameters(attempt):
    return {"any_attempt": attempt is None, "attempt": 0 if attempt is None else attempt}


def _double(number):
    """Return ``number`` as the column stores it (double precision), so that the statement
    is prepared once whatever the kind of number a handler reports."""
    return None if number is None else float(number)


def _write_one(sql, params):
    """Run ``sql``, a write of one statement; return whether it wrote (returned a row)."""
    with statement_cursor(connections[database()]) as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone() is not None


def settle(daemon, outcomes):
    """Write the ends (FINISHED or FAILED ``Outcome``) and unwritten starts of many attempts
    in one statement; return the keys of the tasks written. An outcome whose attempt was
    superseded, or whose task is not in a state to move so, writes nothing."""
    return {row[0] for row in _locked_round(SQL["settle"], settle_parameters(daemon, outcomes))}


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
        "started_agos": [None if outcome.started_ago is None else float(outcome.started_ago)
                         for outcome in outcomes],
        # The daemon's row, locked first (lock_round) when ``daemon`` is one, not a label.
        "daemon": getattr(daemon, "pk", None), "label": daemon_label(daemon),
    }


def enqueue_parameters(task_type, instance, not_before, size):
    """Return the parameters ``enqueue`` and ``enqueue_many`` share: the values of the
    unsaved ``instance`` by column, the type as read, inputs of ``size`` bytes, and when
    the queue row becomes runnable (``not_before``: a datetime, or a delay from its
    creation)."""
    connection = connections[database()]
    at = not_before if isinstance(not_before, datetime.datetime) else None
    return {
        **{field.column: field.get_db_prep_save(getattr(instance, field.attname), connection)
           for field in stored_fields(Instance)},
        "type_identifier": task_type.identifier, "input_format": task_type.input_format,
        "max_input_bytes": conf.MAX_INPUT_BYTES, "size": size, "pull": task_type.pull,
        "not_before": at, "delay": None if at is not None else not_before,
    }


def enqueue(task_type, instance, data, not_before, size, notify):
    """Write one task (its instance, queue row, inputs and first history entry), and with
    ``notify`` wake the idle daemons at its commit, in one statement, prepared like the
    daemons' (``statement_cursor``); return the task's key and creation time, or None when
    ``task_type`` changed since it was read (read it again then).

    ``instance`` is the unsaved ``Instance``; ``not_before`` a delay (timedelta, from
    the statement's time) or a datetime. Raise ``IntegrityError`` for a live duplicate.
    """
    params = {**enqueue_parameters(task_type, instance, not_before, size), "data": data,
              "notify": bool(notify)}
    with statement_cursor(connections[database()]) as cursor:
        cursor.execute(SQL["enqueue"], params)
        row = cursor.fetchone()
    return None if row is None else row[:2]


def enqueue_many(task_type, identifiers, data, priority, not_before, notify, tag=None,
                 named=False):
    """Write many tasks of ``task_type`` in one statement: the rows of each table come
    from arrays (``unnest``), so the cost per task is the database's, not the ORM's.
    ``named``: the identifiers were given, not drawn.

    Return ``(key, identifier, creation time)`` per task, or None when ``task_type``
    changed since it was read. Raise ``IntegrityError`` for a live duplicate.
    """
    template = Instance(type=task_type, identifier="", priority=priority, named=named,
                        batch_id=current_batch_id(), tag=tag)
    size = max((len(item.encode("utf-8")) for item in data), default=0)
    params = {**enqueue_parameters(task_type, template, not_before, size),
              "identifiers": identifiers, "data": data}
    with connections[database()].cursor() as cursor:
        cursor.execute(SQL["enqueue_many"], params)
        rows = cursor.fetchall()
        if not rows:
            return None
        if notify:
            cursor.execute(SQL["notify"])
    created = next(created for _, _, created in rows if created is not None)
    return [(pk, identifier, created) for pk, identifier, _ in rows]


class PostgreSQLEngine(StatementsEngine):
    """Each verb one statement (data-modifying common table expressions), prepared once
    per connection; a claim within limits locks the limited types first."""

    name = "postgresql"
    one_statement = ONE_STATEMENT
    verbs = sys.modules[__name__]

    def claim(self, daemon, limit, type_ids, *, start=0, inputs=False, limited=False):
        return self.transaction(lambda: claim(daemon, limit, type_ids, start, inputs, limited))

    def log(self, pk, message, attempt, daemon):
        return self.transaction(lambda: log(pk, message, attempt, daemon))

    def set_progress(self, pk, done, total, message, attempt):
        return self.transaction(lambda: set_progress(pk, done, total, message, attempt))

    def settle_and_claim(self, daemon, outcomes, limit, type_ids, *, start, limited=False):
        settled, claimed = self.transaction(
            lambda: settle_and_claim(daemon, outcomes, limit, type_ids, start, limited))
        if claimed is None:  # it met a type with a limit: claim within limits
            claimed = self.claim(daemon, limit, type_ids, start=start, inputs=True, limited=True)
        return settled, claimed
