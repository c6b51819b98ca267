"""Read-only figures about the queue, for the dashboard, the admin, the metrics, the
health probe and operators.

Each query reads something small however many ended tasks are kept: live tasks are
counted through the queue table (which holds only them), ended ones only for a recent
window, through the partial index on ended tasks. Nothing here writes.
"""

import datetime
from dataclasses import dataclass

from django.db.models import Count, DurationField, ExpressionWrapper, F, Min, Q, Sum, Value
from django.db.models.functions import Now

from atp.conf import conf
from atp.models import Daemon, Instance, Task, Type
from atp.states import LIVE, TERMINAL, Status

#: How far back the dashboard counts ended tasks.
RECENT = datetime.timedelta(hours=1)


def live_counts():
    """Return ``{(type_id, status): count}`` of the live tasks."""
    rows = (
        Task.objects.filter(instance__status__in=LIVE)
        .values_list("type_id", "instance__status").annotate(count=Count("pk")).order_by()
    )
    return {(type_id, status): count for type_id, status, count in rows}


def ended_counts(within=RECENT):
    """Return ``{(type_id, status): count}`` of the tasks that ended within ``within``."""
    # Naming every type lets the (type, finished) index be read as one short range per
    # type; a bare time range cannot use it and would read the whole table.
    type_ids = list(Type.objects.values_list("pk", flat=True))
    rows = (
        Instance.objects.filter(
            type_id__in=type_ids, status__in=TERMINAL, finished__gte=Now() - Value(within)
        ).values_list("type_id", "status").annotate(count=Count("pk")).order_by()
    )
    return {(type_id, status): count for type_id, status, count in rows}


@dataclass(frozen=True)
class Waiting:
    """Tasks in the queue that no daemon has claimed."""

    runnable: int
    delayed: int
    oldest_since: datetime.datetime = None


def _waiting_figures():
    # Read through the claim index, which holds only the unclaimed rows.
    return {
        "runnable": Count("pk", filter=Q(not_before__lte=Now())),
        "delayed": Count("pk", filter=Q(not_before__gt=Now())),
        "oldest": Min("not_before", filter=Q(not_before__lte=Now())),
    }


def waiting():
    """Return how many tasks wait to be claimed, and since when the oldest runnable one can run."""
    figures = Task.objects.filter(daemon__isnull=True).aggregate(**_waiting_figures())
    return Waiting(figures["runnable"], figures["delayed"], figures["oldest"])


def waiting_by_type():
    """Return ``{type_id: Waiting}`` for the types that have tasks waiting to be claimed."""
    rows = (
        Task.objects.filter(daemon__isnull=True).values("type_id")
        .annotate(**_waiting_figures()).order_by()
    )
    return {row["type_id"]: Waiting(row["runnable"], row["delayed"], row["oldest"]) for row in rows}


def _is_live(prefix=""):
    """Return the condition of a daemon heard from within ``ATP_DAEMON_TIMEOUT_SECONDS``."""
    timeout = datetime.timedelta(seconds=conf.DAEMON_TIMEOUT_SECONDS)
    return Q(**{f"{prefix}stopped__isnull": True, f"{prefix}heartbeat__gte": Now() - Value(timeout)})


def live_daemons():
    """Return the daemons heard from within ``ATP_DAEMON_TIMEOUT_SECONDS``, with ``running`` counts."""
    return list(
        Daemon.objects.filter(_is_live(), consumer__isnull=True).annotate(running=Count("leases", distinct=True))
        .order_by("host", "pid")
    )


def daemons_gone_with_leases():
    """Return the daemons (not pull consumers, whose leases end at their deadline) that
    stopped, or were not heard from within ``ATP_DAEMON_TIMEOUT_SECONDS``, and still hold
    leases, with ``held``: how many. Their tasks stay where they are until a live daemon
    reaps the silent ones; nothing releases the leases of a stopped one."""
    return list(
        Daemon.objects.filter(consumer__isnull=True).exclude(_is_live())
        .annotate(held=Count("leases")).filter(held__gt=0).order_by("pk")
    )


def with_runners(types):
    """Annotate a queryset of types with ``runners``: how many live daemons run each."""
    return types.annotate(runners=Count("served_by", filter=_is_live("served_by__"), distinct=True))


def types_with_counts():
    """Return every type with ``live`` (by state) and ``ended`` (recently, by state) counts,
    and ``runners``, how many live daemons run it."""
    live, ended = live_counts(), ended_counts()
    types = list(with_runners(Type.objects.order_by("identifier")))
    for task_type in types:
        task_type.live = {s: live.get((task_type.pk, s), 0) for s in LIVE}
        task_type.ended = {s: ended.get((task_type.pk, s), 0) for s in TERMINAL}
        task_type.waiting = task_type.live[Status.ACCEPTED]
    return types


#: The upper bounds, in seconds, of the buckets of ``ended_spans``' histograms: from
#: tasks that take milliseconds to those that take hours.
BUCKET_BOUNDS_SECONDS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400)

#: What ``ended_spans`` measures: from which of a task's times to which.
SPANS = {"run": ("started", "finished"), "wait": ("created", "started")}


@dataclass(frozen=True)
class Histogram:
    """How many tasks took at most each of ``BUCKET_BOUNDS_SECONDS`` (cumulative), of how
    many (``count``), and how long they took together (``sum_seconds``)."""

    buckets: tuple
    count: int
    sum_seconds: float


@dataclass(frozen=True)
class Ended:
    """The tasks of one type that ended within a window: how many in each state, and
    histograms of their ``run`` and ``wait`` times (of those that started)."""

    counts: dict
    run: Histogram
    wait: Histogram


def ended_spans(within):
    """Return ``{type_id: Ended}`` for the types whose tasks ended within ``within``.

    Reads the same short ranges of the index on ended tasks as ``ended_counts``, and the
    rows they point to for their times: its cost grows with the tasks that ended within
    ``within``, never with the history.
    """
    type_ids = list(Type.objects.values_list("pk", flat=True))
    spans = {name: ExpressionWrapper(F(end) - F(begin), output_field=DurationField())
             for name, (begin, end) in SPANS.items()}
    started = Q(started__isnull=False)
    figures = {"ended": Count("pk")}
    for name in SPANS:
        for index, bound in enumerate(BUCKET_BOUNDS_SECONDS):
            figures[f"{name}_{index}"] = Count(
                "pk", filter=started & Q(**{f"{name}__lte": datetime.timedelta(seconds=bound)}))
        figures[f"{name}_count"] = Count("pk", filter=started)
        figures[f"{name}_sum"] = Sum(name, filter=started)
    rows = (
        Instance.objects.filter(
            type_id__in=type_ids, status__in=TERMINAL, finished__gte=Now() - Value(within)
        ).alias(**spans).values("type_id", "status").annotate(**figures).order_by()
    )
    by_type = {}
    for row in rows:
        by_type.setdefault(row["type_id"], []).append(row)
    return {type_id: Ended(
        counts={row["status"]: row["ended"] for row in rows},
        run=_histogram(rows, "run"), wait=_histogram(rows, "wait"),
    ) for type_id, rows in by_type.items()}


def _histogram(rows, name):
    """Add up the figures of ``name`` in ``rows`` (one per state) into one ``Histogram``."""
    buckets = tuple(sum(row[f"{name}_{index}"] for row in rows)
                    for index in range(len(BUCKET_BOUNDS_SECONDS)))
    total = sum((row[f"{name}_sum"] for row in rows if row[f"{name}_sum"] is not None),
                datetime.timedelta())
    return Histogram(buckets, sum(row[f"{name}_count"] for row in rows), total.total_seconds())


@dataclass(frozen=True)
class DaemonTotals:
    """The live daemons (not pull consumers) and the worker processes they run."""

    daemons: int
    workers: int


def live_daemon_totals():
    """Return how many daemons are live and how many workers they run together."""
    figures = Daemon.objects.filter(_is_live(), consumer__isnull=True).aggregate(
        daemons=Count("pk"), workers=Sum("workers"))
    return DaemonTotals(figures["daemons"], figures["workers"] or 0)


def claimable(waiting):
    """Return the part of ``waiting`` (as from ``waiting_by_type``) that daemons would claim
    now: the types with runnable tasks, less paused types (an operator holds them) and
    pull types (consumers lease their tasks, never a daemon)."""
    type_ids = [type_id for type_id, figures in waiting.items() if figures.runnable]
    held = Type.objects.filter(Q(is_paused=True) | Q(pull=True), pk__in=type_ids)
    held_ids = set(held.values_list("pk", flat=True)) if type_ids else set()
    return {type_id: waiting[type_id] for type_id in type_ids if type_id not in held_ids}


def unserved_types(claimable_waiting):
    """Return the types of ``claimable_waiting`` (as from ``claimable``) that no live daemon
    runs, in identifier order, each with ``runnable``: how many of its tasks wait."""
    types = with_runners(Type.objects.filter(pk__in=list(claimable_waiting)))
    unserved = list(types.filter(runners=0).order_by("identifier")) if claimable_waiting else []
    for task_type in unserved:
        task_type.runnable = claimable_waiting[task_type.pk].runnable
    return unserved
