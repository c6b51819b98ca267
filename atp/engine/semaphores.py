"""Semaphores: named counters of slots that tasks hold while their attempt runs.

A task names the semaphores it needs at enqueue (``hold=["account-42"]``, or
``key="user-42"`` for its type's semaphore of that key, whose limit is the type's
``key_concurrency``). A semaphore has a limit (1 by default: a mutex; ``set_semaphore``).
A task is claimed only while **every** semaphore it holds has a free slot, and the claim
takes a slot of each in its own transaction, all or none: no task waits holding some of
its slots, so no set of tasks can deadlock, whatever order they name them in.

A slot is held for as long as the attempt holds its lease, and counted so: the holders
of a semaphore are the tasks holding it whose queue row is leased (``Task.daemon``). So
every way a lease ends (the end of the attempt, a restart, a hand-back, a reaper, an
expired pull lease) frees the slot, with nothing more to write. A waiting task holds
no slot, and no worker.

The engines' own claims take no task of a gated type (one whose tasks may hold
semaphores: ``Type.gated``, set by the first enqueue naming one, and kept), nor any
task that holds one (``Task.gated``); ``claim_gated`` claims them, with the portable
form of the claim (``atp.engine.orm``), for every engine. It locks the semaphores it
meets (``FOR NO KEY UPDATE SKIP LOCKED``: one another claim holds counts as full this
round, so claims never wait for each other), counts their holders under the lock, and
skips a task whose semaphores are full: tasks of a busy key do not hold up others.
"""

import collections
import datetime
import math
import re

from django.db import connections
from django.db.models import Case, Count, DateTimeField, F, Max, Min, Q, Value, When

from atp.db import database_now
from atp.engine.base import database, queue_write
from atp.exceptions import InvalidParameter
from atp.models import KEY_MAX_LENGTH, SEMAPHORE_NAME_MAX_LENGTH, Hold, Semaphore, Task, Type
from atp.rates import tokens_now

#: A semaphore's name, and a key: letters, digits and ``_ - . : /``.
NAME = re.compile(r"[A-Za-z0-9_.:/-]+")
#: The most semaphores one task holds.
HOLDS_MAX = 16
#: The largest limit of a semaphore (0 closes it: no task holding it starts).
LIMIT_MAX = 2**31 - 1
#: How far apart the turns of a key's waiting tasks are (``turns``): a key with n tasks
#: waiting gives way to those enqueued by other keys up to n seconds after them.
TURN = datetime.timedelta(seconds=1)


def _clean_name(name, what, most):
    if not isinstance(name, str) or not NAME.fullmatch(name) or len(name) > most:
        raise InvalidParameter(
            f"{what} has 1 to {most} letters, digits, '_', '-', '.', ':' or '/', not {name!r}")
    return name


def clean_semaphore_name(name):
    """Return ``name``, a semaphore's name, checked; raise ``InvalidParameter``."""
    return _clean_name(name, "a semaphore's name", SEMAPHORE_NAME_MAX_LENGTH)


def key_semaphore_name(task_type, key):
    """Return the name of the semaphore of ``key`` of ``task_type``: ``[<type key>]<key>``
    (no name given to ``set_semaphore`` can be one: it has brackets; ``Semaphore.label``
    is the one shown)."""
    return f"[{task_type.pk}]{key}"


def clean_holds(hold, key, task_type):
    """Return the semaphores a task of ``task_type`` holds, as ``[(name, key's type or
    None)]``, from ``enqueue``'s ``hold`` (names) and ``key``; raise ``InvalidParameter``."""
    if hold is None:
        hold = []
    elif isinstance(hold, str) or not isinstance(hold, (list, tuple, set, frozenset)):
        raise InvalidParameter(f"hold is a list of semaphore names, not {hold!r}")
    names = [clean_semaphore_name(name) for name in hold]
    if len(set(names)) != len(names):
        raise InvalidParameter(f"hold names a semaphore twice: {names!r}")
    holds = [(name, None) for name in names]
    if key is not None:
        key = _clean_name(key, "a key", KEY_MAX_LENGTH)
        if task_type.key_concurrency is None and task_type.key_rate is None:
            raise InvalidParameter(
                f"task type {task_type.identifier!r} has no key_concurrency nor key_rate: a "
                "key would limit nothing (register the type with key_concurrency=N or "
                "key_rate=\"10/m\")")
        holds.append((key_semaphore_name(task_type, key), task_type))
    if len(holds) > HOLDS_MAX:
        raise InvalidParameter(f"a task holds at most {HOLDS_MAX} semaphores, not {len(holds)}")
    if holds and task_type.pull:
        raise InvalidParameter(f"task type {task_type.identifier!r} is a pull type: its "
                               "tasks hold no semaphore")
    return holds


def make_semaphores(holds):
    """Make the semaphores of ``holds`` (``clean_holds``'s) that do not exist yet (a mutex,
    or a key's); return ``{name: primary key}`` of them all. Run in the enqueue's
    transaction."""
    Semaphore.objects.bulk_create(
        [Semaphore(name=name, limit=None if key_type else 1, type=key_type)
         for name, key_type in holds], ignore_conflicts=True)
    return dict(Semaphore.objects.filter(name__in=[name for name, _ in holds])
                .values_list("name", "pk"))


def key_of(holds, ids):
    """Return the primary key of the semaphore of the task's key among ``holds`` (``ids``:
    ``make_semaphores``'s), or None."""
    return next((ids[name] for name, key_type in holds if key_type is not None), None)


def turns(key, priority, not_before, now, count):
    """Return the turns of ``count`` new tasks of ``priority`` due at ``not_before`` (at
    ``now``, the database's time) whose key's semaphore is ``key`` (None: no key): where
    each goes in the gated rows' claim order (``Task.turn``).

    A task without a key takes its turn at its due time. A key's tasks take turns
    ``TURN`` apart, from where the gated claims of their priority are
    (``service_point``), or after the last turn of the key's tasks of that priority
    already due and waiting when that is later: start-time fair queueing. A key with many
    waiting gives way to the tasks of other keys enqueued meanwhile, which do not wait
    behind its backlog; a key none of whose tasks waits starts again where the claims
    are. A task due later takes its turn as if due now (it is claimed only once due),
    and does not push back the key's tasks due before it. The last turn is read from the
    key's waiting rows (``atp_task_key_idx``)."""
    if key is None:
        return [not_before] * count
    last = (Task.objects.filter(key_id=key, daemon__isnull=True, priority=priority,
                                not_before__lte=now)
            .order_by("-turn").values_list("turn", flat=True).first())
    first = service_point(priority, now)
    if last is not None:
        first = max(first, last + TURN)
    return [first + index * TURN for index in range(count)]


def service_point(priority, now):
    """Return the turn the gated claims of ``priority`` are at (the virtual time of fair
    queueing): the latest turn among the gated tasks in service (leased, few); with none,
    the first among those waiting and due (the next a claim weighs); else ``now``."""
    serving = (Task.objects.filter(daemon__isnull=False, gated=True, priority=priority)
               .aggregate(turn=Max("turn"))["turn"])
    if serving is not None:
        return serving
    head = (Task.objects.filter(daemon__isnull=True, gated=True, priority=priority,
                                not_before__lte=now)
            .order_by("turn").values_list("turn", flat=True).first())
    return now if head is None else min(head, now)


def requeued(pk, task_type_id, priority, now):
    """Return the fields of a new queue row of task ``pk`` (of type ``task_type_id`` and
    ``priority``) due at ``now`` (an operator's re-enqueue): it still holds its
    semaphores, so it is gated, with its key, and its turn as a new task of its key's."""
    held = list(Hold.objects.filter(instance_id=pk).values_list("semaphore_id",
                                                                "semaphore__type_id"))
    if not held:
        return {"gated": False}
    key = next((semaphore for semaphore, type_id in held if type_id == task_type_id), None)
    return {"gated": True, "key_id": key, "turn": turns(key, priority, now, now, 1)[0]}


def due_at(due):
    """Return the fields that make a waiting queue row due at ``due`` (a time, or an
    expression of one): a gated row also takes its turn then (a retry, a snooze, a task
    run now or resumed goes where a task without a key due then would: ahead of its
    key's backlog, which it was part of)."""
    if not hasattr(due, "resolve_expression"):
        due = Value(due, output_field=DateTimeField())
    return {"not_before": due, "turn": Case(When(gated=True, then=due), default=F("turn"))}


def write_holds(task_type, instances, holds, ids):
    """Make each of ``instances`` (written, with their queue rows marked ``gated``) hold
    ``holds`` (``clean_holds``'s; ``ids``: ``make_semaphores``'s), and mark ``task_type``
    gated: from now on ``claim_gated`` claims its tasks. Run in the enqueue's transaction."""
    Hold.objects.bulk_create(Hold(instance=instance, semaphore_id=ids[name])
                             for instance in instances for name, _ in holds)
    if not task_type.gated:
        Type.objects.filter(pk=task_type.pk, gated=False).update(gated=True)


@queue_write
def set_semaphore(name, limit):
    """Make semaphore ``name`` allow ``limit`` holders at once (0 closes it); return it.

    Tasks already holding it keep their slots when the limit is lowered: no new one is
    claimed until they are fewer than the limit. A key's semaphore takes its type's
    ``key_concurrency``. Raise ``InvalidParameter``."""
    name = clean_semaphore_name(name)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= LIMIT_MAX:
        raise InvalidParameter(f"a semaphore's limit is an integer from 0 to {LIMIT_MAX}, "
                               f"not {limit!r}")
    semaphore, _ = Semaphore.objects.update_or_create(name=name, defaults={"limit": limit})
    return semaphore


def holders(semaphore_ids):
    """Return ``{semaphore id: how many tasks hold a slot of it}``: those whose attempt
    holds a lease. Read from the leased queue rows, which are few (about as many as the
    daemons have workers), not from the holds, which may be many."""
    return dict(
        Task.objects.filter(daemon__isnull=False, instance__holds__semaphore_id__in=semaphore_ids)
        .values("instance__holds__semaphore_id").annotate(count=Count("pk"))
        .values_list("instance__holds__semaphore_id", "count"))


class Gates:
    """The semaphores one claim met, locked for it, and the slots each has left.

    ``holds_of`` reads what the tasks read next hold; ``look_ahead`` locks and counts the
    semaphores of the next few; ``admit`` takes a slot of each semaphore of a task, all
    of them or none, locking and counting those it meets for the first time. Only those
    of the tasks the claim weighs are locked: a semaphore it locks is full for the other
    daemons' claims until it commits."""

    def __init__(self):
        self.left = {}  # semaphore id -> slots left this round (None: no limit)
        # semaphore id -> (its key's bucket as of ``now``, slots taken of it this round)
        self.buckets = {}
        self.per_key = {}  # a key's type -> (key_concurrency, key_rate, key_bucket_size)
        self.now = None

    def holds_of(self, pks):
        """Return ``{key: [semaphore id]}`` of the tasks ``pks``."""
        held = collections.defaultdict(list)
        for pk, semaphore_id in Hold.objects.filter(instance_id__in=pks).values_list(
                "instance_id", "semaphore_id"):
            held[pk].append(semaphore_id)
        return held

    def knows(self, semaphore_ids):
        """Return whether each of ``semaphore_ids`` is locked and counted already."""
        return all(pk in self.left for pk in semaphore_ids)

    def look_ahead(self, holds):
        """Lock and count at once the semaphores of ``holds`` (those of the tasks the claim
        weighs next, each a list of semaphore ids) it has not met: one statement for them
        all, rather than one a task (``admit`` locks those it meets alone)."""
        met = {pk for ids in holds for pk in ids} - self.left.keys()
        if met:
            self._lock(met)

    def _lock(self, ids):
        features = connections[database()].features
        rows = Semaphore.objects.filter(pk__in=ids).order_by("pk")
        if features.has_select_for_update:
            # One another claim holds is full for this one: it does not wait for it.
            rows = rows.select_for_update(
                skip_locked=features.has_select_for_update_skip_locked,
                no_key=features.has_select_for_no_key_update)
        locked = list(rows.values_list("pk", "limit", "type_id", "tokens", "tokens_at"))
        key_types = {type_id for _, limit, type_id, _, _ in locked
                     if limit is None and type_id and type_id not in self.per_key}
        if key_types:  # each type's once a claim
            self.per_key.update((pk, rest) for pk, *rest in Type.objects.filter(
                pk__in=key_types).values_list("pk", "key_concurrency", "key_rate",
                                              "key_bucket_size"))
        per_key = self.per_key
        held = holders([pk for pk, *_ in locked])
        for pk in ids:
            self.left[pk] = 0  # not locked: another claim holds it
        for pk, limit, type_id, tokens, tokens_at in locked:
            rate = size = None
            if limit is None and type_id:
                limit, rate, size = per_key.get(type_id, (None, None, None))
            left = None if limit is None else max(0, limit - held.get(pk, 0))
            if rate is not None:  # a key's rate: the whole tokens in its bucket, as of now
                if self.now is None:
                    self.now = database_now(database())
                bucket = tokens_now(rate, size, tokens, tokens_at, self.now)
                self.buckets[pk] = [bucket, 0]
                whole = max(0, math.floor(bucket))
                left = whole if left is None else min(left, whole)
            self.left[pk] = left

    def admit(self, semaphore_ids):
        """Take a slot of each of ``semaphore_ids`` and return True, if each has one left;
        else take none and return False."""
        met = set(semaphore_ids) - self.left.keys()
        if met:
            self._lock(met)
        if any(self.left[pk] is not None and self.left[pk] < 1 for pk in semaphore_ids):
            return False
        self._count(semaphore_ids, -1)
        return True

    def give_back(self, semaphore_ids):
        """Return the slots ``admit`` took of ``semaphore_ids``."""
        self._count(semaphore_ids, 1)

    def _count(self, semaphore_ids, change):
        for pk in semaphore_ids:
            if self.left[pk] is not None:
                self.left[pk] += change
            if pk in self.buckets:
                self.buckets[pk][1] -= change

    def spend(self):
        """Take a token from its key's bucket per slot taken, in the claim's transaction (a
        bucket none was taken from is left as it is: its refill counts from the same time)."""
        for pk, (bucket, taken) in self.buckets.items():
            if taken:
                Semaphore.objects.filter(pk=pk).update(tokens=bucket - taken, tokens_at=self.now)


def after(priority, turn, pk):
    """Return the filter of the waiting gated rows after ``(priority, turn, pk)`` in their
    claim order (``atp.engine.sql.GATED_ORDER``)."""
    return (Q(priority__lt=priority) | Q(priority=priority, turn__gt=turn)
            | Q(priority=priority, turn=turn, instance_id__gt=pk))


def claim_gated(daemon, limit, type_ids, *, start=0, inputs=False):
    """Claim up to ``limit`` runnable tasks of the gated types among ``type_ids`` for
    ``daemon`` (their semaphores counted), as the engines' claims do the others';
    start the first ``start``; return them in claim order. One transaction of the
    current engine's. Raise ``DaemonStopped``."""
    from atp.engine.engines import engine
    from atp.engine.orm import claim_in_transaction

    return engine().transaction(lambda: claim_in_transaction(
        daemon, limit, type_ids, start, inputs, gated=True), one_statement=False)


def next_due(type_ids, within):
    """Return in how many seconds the first gated task of ``type_ids`` waiting for its
    time becomes runnable, if it does within ``within`` seconds, else None
    (``atp.engine.claim.next_due`` for the gated tasks, which are not in the claim
    index). A read of the waiting gated rows of those types (their index has no due
    times: a key's turn is not its due time), when a daemon serving them is idle."""
    now = database_now(database())
    first = (Task.objects.filter(gated=True, daemon__isnull=True, paused_since__isnull=True,
                                 type_id__in=type_ids, not_before__gt=now,
                                 not_before__lt=now + datetime.timedelta(seconds=within))
             .aggregate(first=Min("not_before"))["first"])
    return None if first is None else max(0.0, (first - now).total_seconds())


def holds_of(pk, task_type):
    """Return the ``hold`` and ``key`` that make a new task of ``task_type`` hold the
    semaphores task ``pk`` holds (``run_again``), as ``enqueue``'s keywords."""
    names = dict(Semaphore.objects.filter(holds__instance_id=pk).values_list("name", "type_id"))
    if not names:
        return {}
    prefix = f"[{task_type.pk}]"
    keys = [name[len(prefix):] for name, type_id in names.items()
            if type_id == task_type.pk and name.startswith(prefix)]
    hold = sorted(name for name, type_id in names.items() if type_id is None)
    return {"hold": hold or None, "key": keys[0] if keys else None}


#: The most holders the task page names of each semaphore.
HOLDERS_SHOWN = 10


def describe_holds(pk):
    """Return the semaphores task ``pk`` holds, for its page: each as ``{"name", "limit"
    (None: no limit), "holders" (keys of the tasks holding a slot, at most
    ``HOLDERS_SHOWN``), "taken" (how many), "full"}``, by name."""
    semaphores = list(Semaphore.objects.filter(holds__instance_id=pk).select_related("type")
                      .order_by("name"))
    if not semaphores:
        return []
    holding = collections.defaultdict(list)
    for task_pk, semaphore_id in (
            Task.objects.filter(daemon__isnull=False,
                                instance__holds__semaphore_id__in=[s.pk for s in semaphores])
            .order_by("instance_id").values_list("instance_id", "instance__holds__semaphore_id")):
        holding[semaphore_id].append(task_pk)
    described = []
    for semaphore in semaphores:
        limit = semaphore.limit
        if limit is None and semaphore.type is not None:
            limit = semaphore.type.key_concurrency
        taken = holding[semaphore.pk]
        described.append({"name": semaphore.label, "limit": limit, "taken": len(taken),
                          "holders": taken[:HOLDERS_SHOWN],
                          "full": limit is not None and len(taken) >= limit})
    return described


def full_semaphores(now):
    """Return the keys of the semaphores with no slot left at ``now``: as many holders as
    their limit, or a key's bucket without a whole token. Read from the leased tasks
    and the buckets spent, both few."""
    held = holders(list(Hold.objects.filter(instance__task__daemon__isnull=False)
                        .values_list("semaphore_id", flat=True).distinct()))
    full = set()
    for pk, limit, key_limit in Semaphore.objects.filter(pk__in=held).values_list(
            "pk", "limit", "type__key_concurrency"):
        limit = limit if limit is not None else key_limit
        if limit is not None and held[pk] >= limit:
            full.add(pk)
    # A bucket left with a whole token by the last claim holds one still.
    for pk, rate, size, tokens, tokens_at in Semaphore.objects.filter(
            type__key_rate__isnull=False, tokens__lt=1).values_list(
            "pk", "type__key_rate", "type__key_bucket_size", "tokens", "tokens_at"):
        if tokens_now(rate, size, tokens, tokens_at, now) < 1:
            full.add(pk)
    full.update(Semaphore.objects.filter(limit=0).values_list("pk", flat=True))
    return full


def held_back(type_ids, now):
    """Return how many runnable tasks of ``type_ids`` wait for a semaphore's slot (or a
    key's token), not for a worker."""
    full = full_semaphores(now)
    if not full:
        return 0
    return (Task.objects.filter(type_id__in=type_ids, gated=True, daemon__isnull=True,
                                paused_since__isnull=True, not_before__lte=now,
                                instance__holds__semaphore_id__in=full)
            .values("instance_id").distinct().count())


def gated_types(type_ids):
    """Return the keys of the gated types among ``type_ids``, sorted."""
    return sorted(Type.objects.filter(pk__in=type_ids, gated=True).values_list("pk", flat=True))
