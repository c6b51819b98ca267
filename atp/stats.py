"""Read-only figures about the queue, for the dashboard, its charts, the admin, the
metrics, the health probe and operators.

Each query reads something small however many ended tasks are kept: live tasks are
counted through the queue table (which holds only them), ended ones only for a recent
window, through the partial index on ended tasks, and the history only for a window,
through its index by state and time. Nothing here writes.
"""

import datetime
from dataclasses import dataclass
from operator import itemgetter

from django.db.models import (
    Case,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    Min,
    OuterRef,
    Q,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import ExtractMinute, Now, TruncHour, TruncMinute
from django.db.models.lookups import LessThan

from atp.conf import conf
from atp.models import Batch, Daemon, Instance, LogRecord, Schedule, Task, Type
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


def ended_counts(within=RECENT, type_ids=None):
    """Return ``{(type_id, status): count}`` of the tasks (of ``type_ids``, default all)
    that ended within ``within``."""
    # Naming every type lets the (type, finished) index be read as one short range per
    # type; a bare time range cannot use it and would read the whole table.
    if type_ids is None:
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


#: The share of ``ATP_DAEMON_TIMEOUT_SECONDS`` after which a daemon not heard from is
#: shown as silent: still live (its tasks stay with it), but perhaps gone.
SILENT_SHARE = 0.5


def _is_live(prefix="", share=1.0):
    """Return the condition of a daemon heard from within ``ATP_DAEMON_TIMEOUT_SECONDS``
    (or ``share`` of it)."""
    timeout = datetime.timedelta(seconds=conf.DAEMON_TIMEOUT_SECONDS * share)
    return Q(**{f"{prefix}stopped__isnull": True, f"{prefix}heartbeat__gte": Now() - Value(timeout)})


def watched_daemons():
    """Return the daemons (not pull consumers) not stopped that are live or still hold
    leases, live ones first, with ``running`` (their leases), ``is_live`` and ``is_heard``
    (heard from within ``SILENT_SHARE`` of the time-out): a live daemon not heard is
    silent, one not live is dead (its tasks go back to the queue once a live daemon reaps
    it)."""
    live, heard = (Case(When(condition, then=Value(True)), default=Value(False))
                   for condition in (_is_live(), _is_live(share=SILENT_SHARE)))
    return list(
        Daemon.objects.filter(stopped__isnull=True, consumer__isnull=True)
        .annotate(running=Count("leases", distinct=True), is_live=live, is_heard=heard)
        .filter(Q(is_live=True) | Q(running__gt=0)).order_by("-is_live", "host", "pid")
    )


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


def types_with_counts(types=None):
    """Return every type (or those of the queryset ``types``) with ``live`` (by state) and
    ``ended`` (recently, by state) counts, ``waiting`` (its accepted tasks), ``held`` (the
    same, for a paused type; else 0) and ``runners``, how many live daemons run it."""
    types = list(with_runners((Type.objects.all() if types is None else types).order_by("identifier")))
    live, ended = live_counts(), ended_counts(type_ids=[task_type.pk for task_type in types])
    for task_type in types:
        task_type.live = {s: live.get((task_type.pk, s), 0) for s in LIVE}
        task_type.ended = {s: ended.get((task_type.pk, s), 0) for s in TERMINAL}
        task_type.waiting = task_type.live[Status.ACCEPTED]
        # A paused type's tasks wait for the operator, not for a daemon.
        task_type.held = task_type.waiting if task_type.is_paused else 0
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

    def quantile(self, q):
        """Return an estimate of the ``q`` quantile (0 < q < 1) in seconds, interpolated
        within the bucket it falls in (as Prometheus' ``histogram_quantile``); the last
        bound when it lies beyond; None when the histogram counted nothing."""
        rank = q * self.count
        lower, below = 0.0, 0
        for bound, cumulative in zip(BUCKET_BOUNDS_SECONDS, self.buckets, strict=True):
            if rank and cumulative >= rank:
                return lower + (bound - lower) * (rank - below) / (cumulative - below)
            lower, below = bound, cumulative
        return BUCKET_BOUNDS_SECONDS[-1] if self.count else None


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
    rows = (
        Instance.objects.filter(
            type_id__in=type_ids, status__in=TERMINAL, finished__gte=Now() - Value(within)
        ).alias(**_spans(SPANS)).values("type_id", "status").annotate(**_span_figures(SPANS))
        .order_by()
    )
    by_type = {}
    for row in rows:
        by_type.setdefault(row["type_id"], []).append(row)
    return {type_id: Ended(
        counts={row["status"]: row["ended"] for row in rows},
        run=_histogram(rows, "run"), wait=_histogram(rows, "wait"),
    ) for type_id, rows in by_type.items()}


def _spans(names):
    """Return the expressions of the spans ``names`` (of ``SPANS``), to alias on tasks."""
    return {name: ExpressionWrapper(F(SPANS[name][1]) - F(SPANS[name][0]), output_field=DurationField())
            for name in names}


def _span_figures(names, with_sum=True):
    """Return the aggregates that ``_histogram`` adds up: how many tasks ended, and for
    each span of ``names`` (aliased by ``_spans``) how many of those that started took at
    most each bound, how many started, and (``with_sum``) their sum."""
    started = Q(started__isnull=False)
    figures = {"ended": Count("pk")}
    for name in names:
        for index, bound in enumerate(BUCKET_BOUNDS_SECONDS):
            figures[f"{name}_{index}"] = Count(
                "pk", filter=started & Q(**{f"{name}__lte": datetime.timedelta(seconds=bound)}))
        figures[f"{name}_count"] = Count("pk", filter=started)
        if with_sum:
            figures[f"{name}_sum"] = Sum(name, filter=started)
    return figures


def _histogram(rows, name):
    """Add up the figures of ``name`` in ``rows`` (one per state) into one ``Histogram``."""
    buckets = tuple(sum(row[f"{name}_{index}"] for row in rows)
                    for index in range(len(BUCKET_BOUNDS_SECONDS)))
    total = sum((row[f"{name}_sum"] for row in rows if row.get(f"{name}_sum") is not None),
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
    held_ids = set().union(*_held_types(type_ids))
    return {type_id: waiting[type_id] for type_id in type_ids if type_id not in held_ids}


@dataclass(frozen=True)
class Queue:
    """The tasks waiting to be claimed, told apart: ``runnable``/``delayed``/``oldest_since``
    of the types daemons claim (as ``Waiting``), ``pull`` (tasks of pull types, waiting
    for a consumer's lease) and ``held`` (tasks of paused types, runnable or delayed)."""

    runnable: int
    delayed: int
    oldest_since: datetime.datetime
    pull: int
    held: int


def queue(waiting):
    """Return the ``Queue`` of ``waiting`` (as from ``waiting_by_type``)."""
    paused, pull = _held_types(list(waiting))
    claimed = [figures for type_id, figures in waiting.items() if type_id not in paused | pull]
    oldest = [figures.oldest_since for figures in claimed if figures.oldest_since]

    def total(type_ids):
        return sum(waiting[type_id].runnable + waiting[type_id].delayed for type_id in type_ids)

    return Queue(
        runnable=sum(figures.runnable for figures in claimed),
        delayed=sum(figures.delayed for figures in claimed),
        oldest_since=min(oldest) if oldest else None,
        pull=total(pull - paused), held=total(paused),
    )


def _held_types(type_ids):
    """Return ``(paused, pull)``: the sets of ``type_ids`` that are paused, and pull types."""
    if not type_ids:
        return set(), set()
    rows = Type.objects.filter(Q(is_paused=True) | Q(pull=True), pk__in=type_ids)
    rows = list(rows.values_list("pk", "is_paused", "pull"))
    return {pk for pk, paused, _ in rows if paused}, {pk for pk, _, pull in rows if pull}


def schedules(limit=10):
    """Return the enabled schedules due soonest (at most ``limit``), with their type."""
    return list(Schedule.objects.filter(enabled=True).select_related("type").order_by("next_run")[:limit])


def open_batches(limit=10):
    """Return the sealed batches not completed (newest first, at most ``limit``), each
    with ``members_total`` and ``members_ended``.

    Read through the index of open batches (a batch still being enqueued is in none:
    it is there a moment later) and the members' (batch, status) index.
    """
    return list(
        Batch.objects.filter(completed__isnull=True, sealed__isnull=False)
        .annotate(members_total=Count("members"),
                  members_ended=Count("members", filter=Q(members__status__in=TERMINAL)))
        .order_by("-pk")[:limit]
    )


def unserved_types(claimable_waiting):
    """Return the types of ``claimable_waiting`` (as from ``claimable``) that no live daemon
    runs, in identifier order, each with ``runnable``: how many of its tasks wait."""
    types = with_runners(Type.objects.filter(pk__in=list(claimable_waiting)))
    unserved = list(types.filter(runners=0).order_by("identifier")) if claimable_waiting else []
    for task_type in unserved:
        task_type.runnable = claimable_waiting[task_type.pk].runnable
    return unserved


# The charts: the queue's history over a window, point by point.

@dataclass(frozen=True)
class Activity:
    """The queue over a window, one point per ``step``, oldest first: when each point's
    step began (``starts``, UTC); tasks that ``finished``, ``failed`` (for good) and were
    ``retried`` (went back to the queue after an attempt) in it; the ``depth`` of the
    queue (tasks waiting to be claimed, delayed ones included) at its end; and a ``wait``
    ``Histogram`` of the tasks that ended in it (from creation to the start of their last
    attempt, as ``ended_spans``; its ``sum_seconds`` is not read, and left at 0)."""

    starts: tuple
    step: datetime.timedelta
    finished: tuple
    failed: tuple
    retried: tuple
    depth: tuple
    wait: tuple


MINUTE = datetime.timedelta(minutes=1)


def activity(now, span, step, type_ids, waiting_now):
    """Return the ``Activity`` of the tasks of ``type_ids`` (None: every type) over the
    ``span`` up to ``now`` (the database clock), a point per ``step`` (a minute, or whole
    minutes dividing an hour), the queue's depth reckoned back from ``waiting_now``: the
    tasks waiting to be claimed now.

    Three queries, each reading the window only, each grouped by point in the database:
    the tasks that ended in it (the index on ended tasks, by type), and the history
    entries that move tasks into and out of the queue (by state and time; a type's
    through their tasks). The depth at the end of a point is the depth now, less the
    tasks that entered the queue since, plus those that left it.
    """
    points = int(span / step)
    last = now.replace(second=0, microsecond=0)
    last -= last.minute % int(step / MINUTE) * MINUTE
    start = last - (points - 1) * step
    if type_ids is None:
        type_ids, moves = list(Type.objects.values_list("pk", flat=True)), LogRecord.objects.all()
    else:
        moves = LogRecord.objects.filter(instance__type_id__in=type_ids)
    ends = Instance.objects.filter(type_id__in=type_ids, status__in=TERMINAL, finished__gte=start)
    group, point_of = _by_point("finished", step)
    ended = list(ends.alias(**_spans(["wait"])).annotate(**group).values(*group, "status")
                 .annotate(**_span_figures(["wait"], with_sum=False)).order_by())
    entered, left, retried = _moves_by_point(moves.filter(time__gte=start), step)

    def index(start_of_point):
        return (start_of_point - start) // step

    def summed(pairs):
        sums = [0] * points
        for at, count in pairs:
            sums[index(at)] += count
        return sums

    finished, failed = ([0] * points for _ in range(2))
    waits = [[] for _ in range(points)]
    for row in ended:
        at = index(point_of(row))
        waits[at].append(row)
        for status, counts in ((Status.FINISHED, finished), (Status.FAILED, failed)):
            counts[at] += row["ended"] if row["status"] == status else 0
    moved = [come - gone for come, gone in zip(summed(entered.items()), summed(left.items()), strict=True)]
    depth, depths = waiting_now, []
    for at in range(points - 1, -1, -1):  # from the current point back
        depths.append(max(depth, 0))
        depth -= moved[at]
    return Activity(
        starts=tuple(start + at * step for at in range(points)), step=step,
        finished=tuple(finished), failed=tuple(failed), retried=tuple(summed(retried.items())),
        depth=tuple(reversed(depths)), wait=tuple(_histogram(rows, "wait") for rows in waits),
    )


def _by_point(field, step):
    """Return the annotations that group rows by the point of ``step`` their ``field``
    falls in, and how to read the start of a row's point from them (all in UTC, whose
    quarters of an hour are those of every time zone's)."""
    if step == MINUTE:
        return {"at": TruncMinute(field, tzinfo=datetime.UTC)}, itemgetter("at")
    each = int(step / MINUTE)
    minute = ExtractMinute(field, tzinfo=datetime.UTC)
    first = Case(*(When(LessThan(minute, begins + each), then=Value(begins))
                   for begins in range(0, 60 - each, each)), default=Value(60 - each))
    group = {"hour": TruncHour(field, tzinfo=datetime.UTC), "first": first}
    return group, lambda row: row["hour"] + row["first"] * MINUTE


def _moves_by_point(recent, step):
    """Return ``({start: count}, {start: count}, {start: count})``: the tasks of the
    history entries ``recent`` that entered the queue, left it, and were retried in each
    point of ``step``."""
    group, point_of = _by_point("time", step)
    rows = (
        recent.filter(status__in=[Status.ACCEPTED, Status.SCHEDULED]).annotate(**group)
        .values(*group, "status")
        .annotate(count=Count("pk"), retried=Count("pk", filter=Q(attempt__gt=0))).order_by()
    )
    entered, left, retried = {}, {}, {}
    for row in rows:
        if row["status"] == Status.ACCEPTED:
            entered[point_of(row)], retried[point_of(row)] = row["count"], row["retried"]
        else:
            left[point_of(row)] = row["count"]
    # A cancel takes a task out of the queue only if it waited there: its state before
    # was ACCEPTED (the entry before it in its own history, by the timeline index).
    before = (LogRecord.objects.filter(instance_id=OuterRef("instance_id"), id__lt=OuterRef("pk"),
                                       status__isnull=False).order_by("-id").values("status")[:1])
    cancels = (
        recent.filter(status=Status.CANCELLED).alias(before=Subquery(before))
        .filter(before=Status.ACCEPTED).annotate(**group).values(*group)
        .annotate(count=Count("pk")).order_by()
    )
    for row in cancels:
        left[point_of(row)] = left.get(point_of(row), 0) + row["count"]
    return entered, left, retried
