"""The verbs every task goes through (enqueue, claim, start, settle), as precompiled SQL on
SQLite.

Written with the ORM, each verb compiles 3 to 6 queries every time it runs, and the
daemon and its workers spend most of their time compiling. Here each verb is a few
statements whose text is written once, run in one immediate transaction (SQLite's single
write lock serialises them with every other writer), with the same guards, history and
fencing as the portable engine (``orm``) and the operators' verbs. SQLite has no
data-modifying common table expressions, but has ``UPDATE ... RETURNING`` (3.35 and
newer; older libraries get the ``orm`` engine). ``SQLiteEngine`` implements the
contract (``atp.engine.contract``).

On SQLite the database clock is this host's clock (the library runs in this process),
so one reading of it (``timezone.now()``) serves every timestamp a verb writes.

The statements are in ``atp/engine/statements/sqlite.sql``, each named and whole; a list
is passed as one JSON parameter, so no statement is built for the number of items.
"""

import collections
import datetime
import json
import math
import sqlite3
import sys

from django.db import connections
from django.utils import timezone

from atp.conf import conf
from atp.engine import statements
from atp.engine.base import daemon_label, database
from atp.engine.batches import current_batch_id
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
from atp.states import Status

#: The engine's statements, by name (``atp/engine/statements/sqlite.sql``).
SQL = statements.load("sqlite")


def _has_json():
    """Return whether this SQLite library has its JSON functions (built in since 3.38)."""
    probe = sqlite3.connect(":memory:")
    try:
        probe.execute(SQL["has_json"])
    except sqlite3.OperationalError:
        return False
    finally:
        probe.close()
    return True


#: Whether this SQLite library has ``RETURNING``, and ``json_each`` for the lists.
IS_SUPPORTED = sqlite3.sqlite_version_info >= (3, 35) and _has_json()
#: Its verbs are several statements: they run in an immediate transaction.
ONE_STATEMENT = False


def _stamp(value):
    """Return a datetime as Django stores it on SQLite (naive UTC text)."""
    return connections[database()].ops.adapt_datetimefield_value(value)


def _listed(values):
    """Return ``values`` as one parameter: a JSON array (read with ``json_each``)."""
    return json.dumps(list(values))


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
        cursor.execute(SQL["alive"], [daemon.pk])
        if cursor.fetchone() is None:
            raise DaemonStopped(f"daemon {daemon} was declared stopped; it claims nothing")
        if not type_ids:
            return [], []
        cursor.execute(SQL["claimable_types"], [_listed(type_ids)])
        types = by_key(builder(Type), cursor.fetchall())
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
        claimed, strays = _lease(cursor, daemon, keys, types, moment, start, inputs)
        if buckets:
            spent = collections.Counter(instance.type_id for instance in claimed)
            cursor.executemany(SQL["spend"], [(tokens - spent[pk], now, pk)
                                              for pk, tokens in buckets.items() if spent[pk]])
    return claimed, strays


def lease_keys(daemon, keys, type_ids, start=0, inputs=False):
    """Lease and schedule the waiting tasks ``keys`` (of the types ``type_ids``), chosen in
    this immediate transaction (the gated claim: ``atp.engine.semaphores``); start the
    first ``start``; return ``(instances in the order of keys, strays)``."""
    with connections[database()].cursor() as cursor:
        cursor.execute(SQL["claimable_types"], [_listed(type_ids)])
        types = by_key(builder(Type), cursor.fetchall())
        return _lease(cursor, daemon, keys, types, timezone.now(), check_start(start), inputs)


def _lease(cursor, daemon, keys, types, moment, start, inputs):
    """Lease the waiting tasks ``keys`` (of ``types``: ``{id: Type}``) to ``daemon`` at
    ``moment``, starting the first ``start``; return ``(instances in the order of keys,
    the keys of those not ACCEPTED: strays)``."""
    now = _stamp(moment)
    cursor.execute(SQL["schedule"], {"daemon": daemon.pk, "now": now,
                                     "starting": _listed(keys[:start]), "keys": _listed(keys)})
    instances = by_key(builder(Instance), cursor.fetchall())
    claimed = []
    for pk in keys:  # in claim order
        instance = instances.get(pk)
        if instance is not None:
            attach(instance, type=types[instance.type_id])
            claimed.append(instance)
    cursor.executemany(SQL["lease"], [
        (daemon.pk, now, _stamp(moment + instance.type.timeout), instance.pk)
        for instance in claimed])
    label = daemon_label(daemon)
    cursor.executemany(SQL["log_row"], [
        (instance.pk, now, step, instance.attempt, "", label)
        for instance in claimed
        for step in ((Status.SCHEDULED, Status.RUNNING)
                     if instance.status == Status.RUNNING else (Status.SCHEDULED,))])
    if inputs and claimed:
        cursor.execute(SQL["inputs_of_claimed"],
                       [_listed(instance.pk for instance in claimed)])
        loaded = {row.instance_id: row for row in map(_inputs, cursor.fetchall())}
        for instance in claimed:
            attach(instance, inputs=loaded[instance.pk])
    return claimed, [pk for pk in keys if pk not in instances]


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
        return SQL["waiting"], {"now": now, "types": _listed(types), "limit": limit}
    leases = {}
    if limits:
        cursor.execute(SQL["leases"], [_listed(limits)])
        leases = dict(cursor.fetchall())
    free = {pk: limit for pk in limits.keys() | buckets.keys()}
    for pk, most in limits.items():
        free[pk] = min(free[pk], most - leases.get(pk, 0))
    for pk, tokens in buckets.items():
        free[pk] = min(free[pk], math.floor(tokens))
    limited = {pk: slots for pk, slots in free.items() if slots > 0}
    unlimited = [pk for pk in types if pk not in free]
    if not (limited or unlimited):
        return None
    return SQL["waiting_within_limits"], {
        "now": now, "unlimited": _listed(unlimited), "free": json.dumps(limited), "limit": limit}


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
        cursor.execute(SQL["next_due"], {"now": _stamp(moment), "bound": _stamp(bound),
                                         "types": _listed(type_ids)})
        row = cursor.fetchone()
    if row is None or row[0] is None:
        return None
    when = datetime.datetime.fromisoformat(str(row[0])).replace(tzinfo=datetime.UTC)
    return max(0.0, (when - moment).total_seconds())


def _inputs(row):
    return build(Inputs, row)


def start(pk, attempt, daemon):
    """Move attempt ``attempt`` of task ``pk`` to RUNNING; return the task with its type and
    inputs. Run it in an immediate transaction. Raise ``InvalidTransition`` (or
    ``AttemptSuperseded``) when it is not SCHEDULED on that attempt."""
    now = _stamp(timezone.now())
    with connections[database()].cursor() as cursor:
        cursor.execute(SQL["start"], {"now": now, "pk": pk, "attempt": attempt})
        row = cursor.fetchone()
        if row is None:
            raise refusal(pk, Status.RUNNING, attempt=attempt)
        instance = build(Instance, row)
        cursor.execute(SQL["log_row"], [pk, now, Status.RUNNING, attempt, "", daemon_label(daemon)])
        cursor.execute(SQL["type_of"], [instance.type_id])
        instance.type = build(Type, cursor.fetchone())
        cursor.execute(SQL["inputs_of"], [pk])
        instance.inputs = build(Inputs, cursor.fetchone())
    return instance


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
        cursor.execute(SQL["dequeue"], [pk])
        if cursor.rowcount == 1:
            cursor.execute(SQL["finish"], {"now": now, "pk": pk, "attempt": attempt})
        if cursor.rowcount != 1:
            raise refusal(pk, Status.FINISHED, attempt=attempt)
        cursor.execute(SQL["log_row"], [pk, now, Status.FINISHED, attempt, message,
                                        daemon_label(daemon)])
        if response is not None:
            cursor.execute(SQL["store"], [pk, data, content_type, charset, len(data), now])
    return attempt


#: The settle's end of an attempt, by the state it ends in.
ENDS = {Status.FINISHED: SQL["end_finished"], Status.FAILED: SQL["end_failed"]}


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
                cursor.execute(SQL["start_and_end"], {"status": status, "now": now, "began": began,
                                                      "pk": pk, "attempt": attempt})
                row = cursor.fetchone()
                if row is not None:
                    cursor.execute(SQL["log_row"], [pk, row[0], Status.RUNNING, attempt, "", label])
            if row is None:  # started already (or its start was not to write): an end only
                if status == Status.RUNNING:
                    continue
                cursor.execute(ENDS[status], {"now": now, "pk": pk, "attempt": attempt})
                if cursor.rowcount != 1:
                    continue
            written.add(pk)
            if status == Status.RUNNING:
                continue
            cursor.execute(SQL["dequeue"], [pk])
            cursor.execute(SQL["log_row"], [pk, now, status, attempt, outcome.message, label])
            if outcome.response is not None:
                data, content_type, charset = outcome.response
                cursor.execute(SQL["store"], [pk, data, content_type, charset, len(data), now])
    return written


def settle_and_claim(daemon, outcomes, limit, type_ids, start):
    """``settle`` then ``claim`` (starting ``start`` tasks, all with their inputs); return
    ``(keys of the tasks settled, what claim returns)``. Run it in an immediate
    transaction: one commit for both (the claim counts the leases the settle ended)."""
    return settle(daemon, outcomes), claim(daemon, limit, type_ids, start, inputs=True)


#: How many bytes of inputs one statement of a bulk enqueue carries at most: SQLite takes
#: no parameter over 1,000,000,000 bytes, and inputs written in a JSON array grow by their
#: escapes (up to 6 times, for control characters).
MAX_STATEMENT_INPUT_BYTES = 100_000_000


def enqueue_many(task_type, identifiers, data, priority, not_before, notify, tag=None,
                 named=False):
    """Write tasks of ``task_type`` (an identifier and encoded inputs each): instance, queue
    row, inputs and first history entry, a statement each for all of them (every
    ``MAX_STATEMENT_INPUT_BYTES`` of inputs); return ``(key, identifier, creation time)``
    per task, or None when ``task_type`` changed since it was read. Run it in an
    immediate transaction. Raise ``IntegrityError`` for a live duplicate.
    """
    connection = connections[database()]
    moment = timezone.now()
    start = not_before if not isinstance(not_before, datetime.timedelta) else moment + not_before
    size = max((len(item.encode("utf-8")) for item in data), default=0)
    per_statement = max(1, MAX_STATEMENT_INPUT_BYTES // (6 * size + 100))
    with connection.cursor() as cursor:
        cursor.execute(SQL["type_as_read"], {
            "type_id": task_type.pk, "type_identifier": task_type.identifier,
            "input_format": task_type.input_format, "max_input_bytes": conf.MAX_INPUT_BYTES,
            "size": size, "pull": task_type.pull, "named": named})
        if cursor.fetchone() is None:
            return None
        instance = row_values(Instance, connection, {
            "type_id": task_type.pk, "priority": priority, "created": moment,
            "updated": moment, "named": named, "batch_id": current_batch_id(), "tag": tag})
        task = row_values(Task, connection, {"type_id": task_type.pk, "priority": priority, "tag": tag,
                                       "enqueued": moment, "not_before": start})
        keys = []
        for begin in range(0, len(identifiers), per_statement):
            names = identifiers[begin:begin + per_statement]
            cursor.execute(SQL["insert_instances"], {**instance, "identifiers": _listed(names)})
            found = dict((identifier, key) for key, identifier in cursor.fetchall())
            chunk = [found[identifier] for identifier in names]
            cursor.execute(SQL["insert_tasks"], {**task, "rows": _listed(zip(chunk, names, strict=True))})
            cursor.execute(SQL["insert_inputs"], {
                "input_format": task_type.input_format,
                "rows": _listed(zip(chunk, data[begin:begin + per_statement], strict=True))})
            cursor.execute(SQL["insert_accepted"], {"time": _stamp(moment), "keys": _listed(chunk)})
            keys += chunk
    if notify:
        notify_runnable()
    return [(key, identifier, moment) for key, identifier in zip(keys, identifiers, strict=True)]


def enqueue(task_type, instance, data, not_before, size, notify):
    """Write one task (``enqueue_many`` of one, ``sql.enqueue_one``)."""
    return enqueue_one(enqueue_many, task_type, instance, data, not_before, notify)


class SQLiteEngine(StatementsEngine):
    """Each verb a few statements written once (``sqlite.sql``), in one immediate
    transaction (the database's single write lock serialises them with every other
    writer)."""

    name = "sqlite"
    one_statement = ONE_STATEMENT
    verbs = sys.modules[__name__]
