"""The portable engine: the verbs of the hot path written with Django's ORM.

It serves any database Django supports that atp has no engine of its own for, and
every database with ``ATP_ENGINE = "orm"``. Its statements are the ORM's, compiled
every time (3 to 6 queries a verb), so it is the slowest engine; it keeps every rule
of the contract (``atp.engine.contract``) with row locks where the database has them:
``SELECT ... FOR UPDATE SKIP LOCKED`` for the waiting rows, the daemon's row locked
against a reaper, the limited types' rows locked while their leases are counted.
What differs by database it asks its ``Database`` (``atp.engine.databases``).
"""

import collections
import datetime
import math

from django.db import connections
from django.db.models import Count
from django.db.models.functions import Now

from atp.db import database_now
from atp.engine.base import database
from atp.engine.claim import (
    claim_index_statement,
    lease_rows,
    limits_of,
    read_runnable,
    repair_stray_row,
    runnable_rows,
    runnable_tasks,
)
from atp.engine.contract import Engine
from atp.engine.enqueue import insert_tasks
from atp.engine.lifecycle import finish_in_transaction, settle_each, start_attempt
from atp.engine.locks import for_update
from atp.engine.pull import lease_in_transaction
from atp.engine.semaphores import Gates, after
from atp.engine.sql import GATED_INDEX
from atp.exceptions import DaemonStopped
from atp.models import Daemon, Instance, Task, Type
from atp.rates import tokens_now

#: How many waiting rows a claim of gated types reads at a time.
GATED_CHUNK = 100


class OrmEngine(Engine):
    """The verbs as ORM queries, on the ``Database`` given."""

    name = "orm"
    #: It reads the type in its own transaction (``insert_tasks``): a type read before is no use.
    checks_type_as_read = False

    def claim(self, daemon, limit, type_ids, *, start=0, inputs=False, limited=False):
        return self.transaction(lambda: (
            claim_in_transaction(daemon, limit, type_ids, start, inputs), []))

    def settle_and_claim(self, daemon, outcomes, limit, type_ids, *, start, limited=False):
        return self.transaction(lambda: (
            settle_each(daemon, outcomes),
            (claim_in_transaction(daemon, limit, type_ids, start, inputs=True), [])))

    def settle(self, daemon, outcomes):
        return self.transaction(lambda: settle_each(daemon, outcomes))

    def start(self, pk, attempt, daemon):
        def start_and_load():
            start_attempt(pk, attempt, daemon)
            return Instance.objects.select_related("type", "inputs").get(pk=pk)

        return self.transaction(start_and_load)

    def finish(self, pk, attempt, message, daemon, response, content_type):
        return finish_in_transaction(pk, message, attempt, daemon, response, content_type)

    def enqueue(self, task_type, instance, data, not_before, size, notify):
        [written] = insert_tasks(task_type, [(instance.identifier, data)], instance.priority,
                            not_before, instance.named, instance.tag)
        return written.pk, written.created

    def enqueue_many(self, task_type, identifiers, data, priority, not_before, notify, *,
                     tag=None, named=False):
        written = insert_tasks(task_type, list(zip(identifiers, data, strict=True)), priority,
                          not_before, named, tag)
        return [(instance.pk, instance.identifier, instance.created) for instance in written]

    def lease(self, type_id, limit, lease, tag, group_by_tag, consumer):
        return self.transaction(lambda: lease_in_transaction(
            type_id, limit, lease, tag, group_by_tag, consumer))

    def log(self, pk, message, attempt, daemon):
        from atp.engine.records import log_in_transaction

        return self.transaction(lambda: log_in_transaction(pk, message, attempt, daemon))

    def set_progress(self, pk, done, total, message, attempt):
        from atp.engine.records import set_progress_in_transaction

        return self.transaction(lambda: set_progress_in_transaction(
            pk, done, total, message, attempt))

    def purge(self, type_id, age, limit):
        from atp.engine.maintenance import purge_in_transaction

        return self.transaction(lambda: purge_in_transaction(type_id, age, limit))

    def next_due(self, type_ids, within):
        bound = Now() + datetime.timedelta(seconds=within)
        first = (Task.objects.filter(daemon__isnull=True, paused_since__isnull=True,
                                     type_id__in=type_ids, not_before__gt=Now(),
                                     not_before__lt=bound)
                 .order_by("not_before").values_list("not_before", flat=True).first())
        if first is None:
            return None
        return max(0.0, (first - database_now(database())).total_seconds())


def claim_in_transaction(daemon, limit, type_ids, start, inputs, *, gated=False):
    """Lock the daemon's row, then claim, counting limited types' leases; start the
    first ``start``; repair the stray rows met (in this transaction). The types of
    ``type_ids``' tasks that hold no semaphore, or with ``gated`` the gated types' tasks
    that do, their semaphores counted (``atp.engine.semaphores``): those are leased by
    the current engine (``Engine.lease_keys``)."""
    _lock_daemon(daemon)
    types = Type.objects.filter(pk__in=type_ids, is_paused=False, pull=False)
    limits = limits_of(types.filter(gated=True) if gated else types)
    if not limits:
        return []
    pks, types_of, (buckets, now) = (_take_gated if gated else _take)(limit, limits)
    if not pks:
        return []
    if gated:
        from atp.engine.engines import engine

        instances, strays = engine().lease_keys(daemon, pks, sorted(set(types_of.values())),
                                                start=start, inputs=inputs)
    else:
        instances, strays = lease_chosen(daemon, pks, start, inputs)
    if buckets:
        _spend_tokens(buckets, now, [types_of[instance.pk] for instance in instances])
    for pk in strays:
        repair_stray_row(pk)
    return instances


def lease_chosen(daemon, pks, start, inputs):
    """Lease the waiting rows ``pks``, chosen and locked in this transaction, to ``daemon``
    with the ORM; start the first ``start``; return ``(instances in claim order, with
    their inputs when ``inputs``; keys of the stray rows)`` (``Engine.lease_keys``)."""
    instances, strays = lease_rows(daemon, pks)
    for instance in instances[:start]:
        start_attempt(instance.pk, instance.attempt, daemon)
    if (start or inputs) and instances:
        position = {instance.pk: index for index, instance in enumerate(instances)}
        related = ("type", "inputs") if inputs else ("type",)
        instances = sorted(
            Instance.objects.filter(pk__in=position).select_related(*related),
            key=lambda instance: position[instance.pk])
    return instances, strays


def _lock_daemon(daemon):
    """Lock ``daemon``'s registry row against a reaper; raise ``DaemonStopped`` if it is stopped."""
    if not for_update(Daemon.objects.filter(pk=daemon.pk, stopped__isnull=True)).exists():
        raise DaemonStopped(f"daemon {daemon} was declared stopped; it claims nothing")


def _free_slots(limits):
    """Return ``(free, buckets, now)``: how many more tasks each limited type may start
    (its ``max_concurrency`` less what runs, and the whole tokens in its bucket), the
    tokens in the bucket of each type with a rate as of ``now`` (``atp.rates``), and
    that moment (None without a rate)."""
    limited = [type_id for type_id, is_limited in limits.items() if is_limited]
    if not limited:
        return {}, {}, None
    # Locking the limited types' rows serialises the claims of those types across
    # daemons, so two daemons cannot both count the last free slot, or token; what is
    # read under the lock is the type as it is now.
    # (FOR NO KEY UPDATE where there is one: an enqueue's foreign key does not wait.)
    no_key = connections[database()].features.has_select_for_no_key_update
    rows = list(Type.objects.select_for_update(no_key=no_key).filter(pk__in=limited)
                .order_by("pk")  # in key order, as the engines lock them
                .values_list("pk", "max_concurrency", "rate", "bucket_size", "tokens",
                             "tokens_at"))
    # What runs is what holds a lease: a task an operator ended or re-enqueued keeps
    # its lease until its worker is stopped, and counts until then.
    leased = dict(
        Task.objects.filter(type_id__in=limited, daemon__isnull=False)
        .values("type_id").annotate(count=Count("pk")).values_list("type_id", "count")
    )
    now = database_now(database()) if any(row[2] is not None for row in rows) else None
    free, buckets = {}, {}
    for type_id, most, rate, size, tokens, tokens_at in rows:
        slots = []
        if most is not None:
            slots.append(most - leased.get(type_id, 0))
        if rate is not None:
            buckets[type_id] = tokens_now(rate, size, tokens, tokens_at, now)
            slots.append(math.floor(buckets[type_id]))
        free[type_id] = min(slots, default=0)  # none: it is limited no more, wait a round
    return free, buckets, now


def _spend_tokens(buckets, now, claimed_types):
    """Take a token from each bucket (``_free_slots``, as of ``now``) per task of its type
    claimed."""
    spent = collections.Counter(claimed_types)
    for type_id, tokens in buckets.items():
        if spent[type_id]:  # a bucket none was taken from stays as it is
            Type.objects.filter(pk=type_id).update(tokens=tokens - spent[type_id], tokens_at=now)


def _take(limit, limits):
    """Return ``(keys of up to limit runnable tasks in claim order, within limits,
    their types, (the buckets of the types with a rate, as of when))``."""
    free, buckets, now = _free_slots(limits)
    eligible = {type_id for type_id in limits if free.get(type_id, 1) > 0}
    taken, types = [], {}
    while eligible and len(taken) < limit:
        wanted = limit - len(taken)
        rows = _runnable_keys(eligible, taken, wanted)
        for pk, type_id in rows:
            if type_id in free:
                if free[type_id] <= 0:
                    continue  # its type filled up earlier in this batch
                free[type_id] -= 1
                if free[type_id] == 0:
                    eligible.discard(type_id)
            taken.append(pk)
            types[pk] = type_id
        if len(rows) < wanted:
            break
    return taken, types, (buckets, now)


def _runnable_keys(type_ids, taken, limit):
    """Return ``(key, type id)`` of up to ``limit`` runnable tasks not in ``taken``, in claim order."""
    rows = runnable_tasks(type_ids).exclude(instance_id__in=taken)
    return read_runnable(rows, ("instance_id", "type_id"), limit)


def runnable_keys_statement(type_ids, taken, limit, cursor):
    """Return the SQL and parameters of the claim's look for runnable tasks (``_runnable_keys``),
    to run on ``cursor`` in this transaction."""
    rows = runnable_tasks(type_ids).exclude(instance_id__in=taken).values_list(
        "instance_id", "type_id")[:limit]
    return claim_index_statement(rows, cursor)


def _take_gated(limit, limits):
    """``_take`` for the gated rows (those holding semaphores): also take a slot of each
    semaphore a task holds, all or none, skipping the tasks whose semaphores are full
    (``atp.engine.semaphores.Gates``).

    The waiting rows are read a chunk at a time in their claim order (by turn: keys take
    turns), each chunk after the last row of the one before, without locks: those chosen
    are then locked, skipping those another claim holds (their slots go back). Read with
    their locks, the rows a claim passes over would be held from other daemons' claims
    until it commits."""
    free, buckets, now = _free_slots(limits)
    eligible = {type_id for type_id in limits if free.get(type_id, 1) > 0}
    gates, taken, types, last = Gates(), [], {}, None
    while eligible and len(taken) < limit:
        rows = runnable_tasks(eligible, gated=True, locked=False)
        if last is not None:
            rows = rows.filter(after(*last))
        # The first chunk a few times the tasks wanted: most are taken, in turns.
        chunk = GATED_CHUNK if last is not None else min(GATED_CHUNK, 16 + 2 * limit)
        rows = read_runnable(rows, ("instance_id", "type_id", "priority", "turn"), chunk,
                             index=GATED_INDEX)
        holds = gates.holds_of([pk for pk, *_ in rows])
        chosen = []
        for index, (pk, type_id, _, _) in enumerate(rows):
            wanted = limit - len(taken) - len(chosen)
            if not wanted:
                break
            if type_id not in eligible or (type_id in free and free[type_id] <= 0):
                continue  # its type filled up earlier in this round
            held = holds.get(pk, ())
            if not gates.knows(held):  # those of the next tasks too, twice as many as wanted
                gates.look_ahead(holds.get(ahead, ())
                                 for ahead, *_ in rows[index:index + 2 * wanted])
            if not gates.admit(held):
                continue  # a semaphore it holds is full: skipped, not waited on
            if type_id in free:
                free[type_id] -= 1
            chosen.append((pk, type_id))
        locked = _lock_chosen([pk for pk, _ in chosen]) if chosen else set()
        for pk, type_id in chosen:
            if pk in locked:
                taken.append(pk)
                types[pk] = type_id
                continue
            gates.give_back(holds.get(pk, ()))  # claimed meanwhile by another
            if type_id in free:
                free[type_id] += 1
        eligible = {type_id for type_id in eligible if free.get(type_id, 1) > 0}
        if len(rows) < chunk:
            break
        _, _, priority, turn = rows[-1]
        if turn.tzinfo is None:  # read raw: in the database's zone
            turn = turn.replace(tzinfo=connections[database()].timezone)
        last = (priority, turn, rows[-1][0])
    gates.spend()
    return taken, types, (buckets, now)


def _lock_chosen(pks):
    """Lock the waiting rows ``pks`` still runnable, by their keys (their types are those
    they were read of), skipping those another claim holds; return the keys of those
    locked. Unordered: ordered in claim order, a database would walk the claim index for
    them."""
    rows = runnable_rows().filter(instance_id__in=pks)
    if connections[database()].features.has_select_for_update_skip_locked:
        rows = rows.select_for_update(skip_locked=True)
    return set(rows.values_list("instance_id", flat=True))
