"""What must hold of the queue tables after any sequence of verbs, daemon deaths and
operator actions, and one function that checks it.

``docs/queue.md`` states the same rules, under the same names. The tests call
``check_queue`` after racing verbs against each other, ``make chaos`` after killing
daemons at random, and operators can call it on a live system: it only reads.

Some rows are transient: a task that an operator ended or re-enqueued while it ran
keeps its queue row leased until its daemon has stopped the worker, within the kill
grace. ``settled=True`` checks a queue with no daemon running, where nothing may be
transient any more.
"""

from dataclasses import dataclass

from django.db import connections, router, transaction
from django.db.models import Exists, F, OuterRef, Q, Subquery
from django.db.models.functions import Now

from atp.engine.databases import database_of
from atp.models import Hold, Instance, LogRecord, Task
from atp.states import IN_FLIGHT, TERMINAL, Status

#: The rules, by name, as ``docs/queue.md`` states them.
RULES = {
    "accepted-queued": "every ACCEPTED task has one queue row, not held; it is leased only "
                       "while a daemon that is not stopped stops its previous worker, or "
                       "until the deadline of a pull consumer's lease",
    "in-flight-leased": "every SCHEDULED, RUNNING or PAUSED task has a queue row leased to "
                        "the task's daemon, which is not stopped; a PAUSED task whose daemon "
                        "went away instead has an unleased row held until it is resumed",
    "ended-off-queue": "a FINISHED, FAILED or CANCELLED task has no queue row, but for one "
                       "leased to a daemon that is not stopped and is stopping its worker, "
                       "or to a pull consumer until its lease's deadline",
    "queue-row-copies": "a queue row has its task's type, identifier and tag",
    "history-ends-in-state": "the latest state in a task's history is the task's state",
    "gated-in-turn": "a queue row is gated exactly when its task holds a semaphore; a gated "
                     "row has a turn and an ungated one none, and its key is a semaphore "
                     "its task holds",
}


@dataclass(frozen=True)
class Violation:
    """One task (or queue row) that breaks one rule."""

    rule: str
    task: int
    detail: str

    def __str__(self):
        return f"task #{self.task} breaks {self.rule}: {self.detail}"


def check_queue(*, settled=False, limit=100):
    """Return the ``Violation`` of every rule, at most ``limit`` per rule (empty: all holds).

    The rules are checked on one snapshot of the database, so that verbs committing
    meanwhile cannot make it see half a change. With ``settled`` no transient row is
    allowed: use it once every daemon stopped.
    """
    alias = router.db_for_read(Instance)
    connection = connections[alias]
    if connection.in_atomic_block:  # the caller's transaction is the snapshot
        return _check(settled, limit)
    with transaction.atomic(using=alias):
        with connection.cursor() as cursor:
            database_of(connection).read_snapshot(cursor)
        return _check(settled, limit)


def _check(settled, limit):
    violations = []
    for rule, detail, offenders in _offenders(settled):
        violations += [Violation(rule, pk, detail) for pk in offenders[:limit]]
    return violations


def _offenders(settled):
    """Yield ``(rule, detail, queryset of task ids)`` for every way a rule can break."""
    tasks = Instance.objects.order_by("pk")
    dead_lease = Q(task__daemon__stopped__isnull=False)
    # A row leased for a moment is allowed to a live daemon only, and not at all once
    # settled; a pull consumer's lease of a task an operator ended or re-enqueued lasts
    # until its deadline (the consumer cannot be stopped), settled or not.
    consumers_lease = Q(task__daemon__consumer__isnull=False, task__deadline__gt=Now())
    transient_lease = (Q(task__daemon__isnull=False) & ~consumers_lease) if settled else dead_lease

    def ids(queryset):
        return list(queryset.values_list("pk", flat=True).distinct())

    accepted = tasks.filter(status=Status.ACCEPTED)
    yield "accepted-queued", "ACCEPTED with no queue row: it never runs", ids(
        accepted.filter(task__isnull=True))
    yield "accepted-queued", "ACCEPTED but held as if paused: it never runs", ids(
        accepted.filter(task__paused_since__isnull=False))
    yield "accepted-queued", "ACCEPTED with a leased queue row that no live daemon releases", ids(
        accepted.filter(transient_lease))

    in_flight = tasks.filter(status__in=IN_FLIGHT)
    yield "in-flight-leased", "in flight with no queue row", ids(in_flight.filter(task__isnull=True))
    yield "in-flight-leased", "SCHEDULED or RUNNING with an unleased queue row", ids(
        in_flight.exclude(status=Status.PAUSED).filter(task__daemon__isnull=True))
    yield "in-flight-leased", "PAUSED with an unleased queue row that is not held", ids(
        in_flight.filter(status=Status.PAUSED, task__daemon__isnull=True,
                         task__paused_since__isnull=True))
    yield "in-flight-leased", "leased to a daemon that is stopped", ids(in_flight.filter(dead_lease))
    yield "in-flight-leased", "leased to another daemon than the one of its attempt", ids(
        in_flight.filter(task__daemon__isnull=False).exclude(task__daemon=F("daemon")))

    ended = tasks.filter(status__in=TERMINAL)
    yield "ended-off-queue", "ended with an unleased queue row: claims would stumble on it", ids(
        ended.filter(task__isnull=False, task__daemon__isnull=True))
    yield "ended-off-queue", "ended with a queue row that no live daemon releases", ids(
        ended.filter(transient_lease))

    rows = Task.objects.order_by("pk")
    yield "queue-row-copies", "its queue row has another type or identifier", list(
        rows.exclude(type_id=F("instance__type_id"), identifier=F("instance__identifier"))
        .values_list("pk", flat=True))
    yield "queue-row-copies", "its queue row has another tag", list(
        rows.filter(Q(tag__isnull=True, instance__tag__isnull=False)
                    | Q(tag__isnull=False, instance__tag__isnull=True)
                    | (Q(tag__isnull=False) & ~Q(tag=F("instance__tag"))))
        .values_list("pk", flat=True))

    held = Hold.objects.filter(instance_id=OuterRef("pk"))
    holding = rows.annotate(holds=Exists(held))
    yield "gated-in-turn", "its queue row is not gated but its task holds a semaphore: a claim "\
        "would take it without a slot", list(
            holding.filter(gated=False, holds=True).values_list("pk", flat=True))
    yield "gated-in-turn", "its queue row is gated but its task holds no semaphore", list(
        holding.filter(gated=True, holds=False).values_list("pk", flat=True))
    yield "gated-in-turn", "its gated queue row has no turn: no claim takes it", list(
        rows.filter(gated=True, turn__isnull=True).values_list("pk", flat=True))
    yield "gated-in-turn", "its ungated queue row has a turn: no claim takes it", list(
        rows.filter(gated=False, turn__isnull=False).values_list("pk", flat=True))
    yield "gated-in-turn", "its queue row's key is no semaphore its task holds", list(
        rows.filter(key__isnull=False).exclude(Exists(held.filter(semaphore_id=OuterRef("key_id"))))
        .values_list("pk", flat=True))

    latest = LogRecord.objects.filter(instance=OuterRef("pk"), status__isnull=False)
    latest = latest.order_by("-id").values("status")[:1]
    yield "history-ends-in-state", "its history ends in another state, or has none", ids(
        tasks.annotate(logged=Subquery(latest))
        .filter(Q(logged__isnull=True) | ~Q(logged=F("status"))))
