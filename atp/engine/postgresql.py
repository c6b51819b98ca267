"""The three verbs every task goes through, as one SQL statement each on PostgreSQL.

A drained queue costs a claim, a start and a finish per task. Written with the ORM
they take 3 to 6 statements each, and the daemon's time goes to round trips and query
compilation. On PostgreSQL each is a single statement of data-modifying common table
expressions, run in the same queue transaction, with the same guards, the same history
and the same locking order (queue row before task row) as the ORM forms in
``claim.py`` and ``lifecycle.py``, which other databases use. The test suite runs on
both, so both forms are held to the same behaviour.
"""

from django.db import connections

from atp.engine.base import daemon_label, database
from atp.engine.records import response_limit
from atp.engine.transitions import refusal
from atp.exceptions import DaemonStopped
from atp.models import Daemon, Inputs, Instance, LogRecord, Response, Task, Type
from atp.serialization import encode_response
from atp.states import Status

TASK, INSTANCE = Task._meta.db_table, Instance._meta.db_table
TYPE, LOG = Type._meta.db_table, LogRecord._meta.db_table
INPUTS, RESPONSE = Inputs._meta.db_table, Response._meta.db_table


def is_available():
    """Return whether the queue's database can run the single-statement forms."""
    return connections[database()].vendor == "postgresql"


def _columns(model, alias):
    return ", ".join(f"{alias}.{field.column}" for field in model._meta.concrete_fields)


def _build(model, values):
    names = [field.attname for field in model._meta.concrete_fields]
    return model.from_db(database(), names, values)


INSTANCE_WIDTH = len(Instance._meta.concrete_fields)
TYPE_WIDTH = len(Type._meta.concrete_fields)
# A daemon's own entries: no person made them (actor is empty).
LOG_COLUMNS = f"INSERT INTO {LOG} (instance_id, time, status, attempt, message, daemon, actor)"

DAEMON = Daemon._meta.db_table

# The order of locks is the one of ``atp.engine.locks``: the daemon's row (KEY SHARE,
# which the leases' foreign key takes anyway: a reaper's FOR UPDATE before it declares
# the daemon stopped waits for this claim, or this claim for the reaper), the queue
# rows (skipping those another claim holds), then the tasks. A row whose task is
# not ACCEPTED is not taken; its key comes back in ``strays`` for repair.
CLAIM = f"""
WITH alive AS (
    SELECT id FROM {DAEMON} WHERE id = %(daemon)s AND stopped IS NULL FOR KEY SHARE
), picked AS (
    SELECT instance_id FROM {TASK}
    WHERE daemon_id IS NULL AND paused_since IS NULL AND not_before <= STATEMENT_TIMESTAMP()
        AND type_id = ANY(%(types)s) AND EXISTS (SELECT 1 FROM alive)
    ORDER BY priority DESC, not_before, instance_id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), scheduled AS (
    UPDATE {INSTANCE} i
    SET status = '{Status.SCHEDULED}', attempt = i.attempt + 1, daemon_id = %(daemon)s,
        updated = STATEMENT_TIMESTAMP()
    FROM picked WHERE i.id = picked.instance_id AND i.status = '{Status.ACCEPTED}'
    RETURNING {_columns(Instance, "i")}
), leased AS (
    UPDATE {TASK} t SET daemon_id = %(daemon)s, claimed = STATEMENT_TIMESTAMP(),
        deadline = STATEMENT_TIMESTAMP() + ty.timeout
    FROM scheduled s, {TYPE} ty WHERE t.instance_id = s.id AND ty.id = t.type_id
    RETURNING t.instance_id, t.priority, t.not_before
), logged AS (
    {LOG_COLUMNS}
    SELECT id, STATEMENT_TIMESTAMP(), '{Status.SCHEDULED}', attempt, '', %(label)s, ''
    FROM scheduled
)
SELECT meta.alive, meta.strays, {_columns(Instance, "s")}, {_columns(Type, "ty")}
FROM (
    SELECT (SELECT count(*) FROM alive) AS alive,
        (SELECT array_agg(instance_id) FROM picked
         WHERE instance_id NOT IN (SELECT id FROM scheduled)) AS strays
) AS meta
LEFT JOIN (scheduled s JOIN {TYPE} ty ON ty.id = s.type_id JOIN leased l ON l.instance_id = s.id)
    ON true
ORDER BY l.priority DESC, l.not_before, s.id
"""


def claim(daemon, limit, type_ids):
    """Lease and schedule up to ``limit`` runnable tasks; return ``(instances, strays)``.

    Raise ``DaemonStopped`` when ``daemon`` was declared stopped.
    """
    with connections[database()].cursor() as cursor:
        cursor.execute(CLAIM, {
            "types": list(type_ids), "limit": limit, "daemon": daemon.pk,
            "label": daemon_label(daemon),
        })
        rows = cursor.fetchall()
    alive, strays = rows[0][:2]
    if not alive:
        raise DaemonStopped(f"daemon {daemon} was declared stopped; it claims nothing")
    instances = []
    for row in rows:
        if row[2] is None:
            continue
        instance = _build(Instance, row[2:2 + INSTANCE_WIDTH])
        instance.type = _build(Type, row[2 + INSTANCE_WIDTH:])
        instances.append(instance)
    return instances, strays or []


START = f"""
WITH started AS (
    UPDATE {INSTANCE} i
    SET status = '{Status.RUNNING}', started = STATEMENT_TIMESTAMP(), updated = STATEMENT_TIMESTAMP()
    WHERE i.id = %(pk)s AND i.status = '{Status.SCHEDULED}' AND i.attempt = %(attempt)s
    RETURNING {_columns(Instance, "i")}
), logged AS (
    {LOG_COLUMNS}
    SELECT id, STATEMENT_TIMESTAMP(), '{Status.RUNNING}', attempt, '', %(label)s, ''
    FROM started
)
SELECT {_columns(Instance, "s")}, {_columns(Type, "ty")}, {_columns(Inputs, "inp")}
FROM started s JOIN {TYPE} ty ON ty.id = s.type_id JOIN {INPUTS} inp ON inp.instance_id = s.id
"""


def start(pk, attempt, daemon):
    """Move attempt ``attempt`` of task ``pk`` to RUNNING; return the task with its type and inputs.

    Raise ``InvalidTransition`` (or ``AttemptSuperseded``) when it is not SCHEDULED on
    that attempt; nothing is written then.
    """
    with connections[database()].cursor() as cursor:
        cursor.execute(START, {"pk": pk, "attempt": attempt, "label": daemon_label(daemon)})
        row = cursor.fetchone()
    if row is None:
        raise refusal(pk, Status.RUNNING, attempt=attempt)
    instance = _build(Instance, row[:INSTANCE_WIDTH])
    instance.type = _build(Type, row[INSTANCE_WIDTH:INSTANCE_WIDTH + TYPE_WIDTH])
    instance.inputs = _build(Inputs, row[INSTANCE_WIDTH + TYPE_WIDTH:])
    return instance


FINISH = f"""
WITH dequeued AS (
    DELETE FROM {TASK} WHERE instance_id = %(pk)s AND daemon_id IS NOT NULL
    RETURNING instance_id
), finished AS (
    UPDATE {INSTANCE} i
    SET status = '{Status.FINISHED}', finished = STATEMENT_TIMESTAMP(), updated = STATEMENT_TIMESTAMP()
    FROM dequeued WHERE i.id = dequeued.instance_id AND i.attempt = %(attempt)s
        AND i.status IN ('{Status.RUNNING}', '{Status.PAUSED}')
    RETURNING i.id, i.attempt
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
    with connections[database()].cursor() as cursor:
        cursor.execute(FINISH, {
            "pk": pk, "attempt": attempt, "message": message, "label": daemon_label(daemon),
            "has_response": response is not None, "data": data, "content_type": content_type,
            "charset": charset, "size": len(data or b""),
        })
        row = cursor.fetchone()
    if row is None:
        raise refusal(pk, Status.FINISHED, attempt=attempt)
    return row[0]
