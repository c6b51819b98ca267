"""The charts' figures: the queue over a window, point by point (tasks finished, failed
and retried, the queue's depth, the wait before start), computed in the database from
the history and the ended tasks of the window only."""

import datetime
from dataclasses import dataclass
from operator import itemgetter

from django.db.models import Case, Count, OuterRef, Q, Subquery, Value, When
from django.db.models.functions import ExtractMinute, TruncHour, TruncMinute
from django.db.models.lookups import LessThan

from atp.histograms import histogram, span_expressions, span_figures
from atp.models import Instance, LogRecord, Type
from atp.states import TERMINAL, Status


@dataclass(frozen=True)
class Activity:
    """The queue over a window, one point per ``step``, oldest first: when each point's
    step began (``starts``, UTC); tasks that ``finished``, ``failed`` (for good) and were
    ``retried`` (went back to the queue after an attempt) in it; the ``depth`` of the
    queue (tasks waiting to be claimed, delayed ones included) at its end; and a ``wait``
    ``Histogram`` of the tasks that ended in it (from creation to the start of their last
    attempt, as ``atp.histograms.ended_spans``; its ``sum_seconds`` is not read, and left at 0)."""

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
    ended = list(ends.alias(**span_expressions(["wait"])).annotate(**group).values(*group, "status")
                 .annotate(**span_figures(["wait"], with_sum=False)).order_by())
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
        depth=tuple(reversed(depths)), wait=tuple(histogram(rows, "wait") for rows in waits),
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
