"""Histograms of how long tasks ran and waited, read from the tasks that ended within a
window: for the metrics (``atp_task_run_seconds``, ``atp_task_wait_seconds``), the
dashboard's and a type's wait quantiles, and the charts' wait per point (``atp.trends``).

They read the index on ended tasks for the window only, and the rows it points to for
their times: the cost grows with the tasks that ended within the window, never with the
history.
"""

import datetime
from dataclasses import dataclass

from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum, Value
from django.db.models.functions import Now

from atp.models import Instance, Type
from atp.states import TERMINAL

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

    Reads the same short ranges of the index on ended tasks as ``atp.stats.ended_counts``, and the
    rows they point to for their times: its cost grows with the tasks that ended within
    ``within``, never with the history.
    """
    type_ids = list(Type.objects.values_list("pk", flat=True))
    rows = (
        Instance.objects.filter(
            type_id__in=type_ids, status__in=TERMINAL, finished__gte=Now() - Value(within)
        ).alias(**span_expressions(SPANS)).values("type_id", "status").annotate(**span_figures(SPANS))
        .order_by()
    )
    by_type = {}
    for row in rows:
        by_type.setdefault(row["type_id"], []).append(row)
    return {type_id: Ended(
        counts={row["status"]: row["ended"] for row in rows},
        run=histogram(rows, "run"), wait=histogram(rows, "wait"),
    ) for type_id, rows in by_type.items()}


def span_expressions(names):
    """Return the expressions of the spans ``names`` (of ``SPANS``), to alias on tasks."""
    return {name: ExpressionWrapper(F(SPANS[name][1]) - F(SPANS[name][0]), output_field=DurationField())
            for name in names}


def span_figures(names, with_sum=True):
    """Return the aggregates that ``histogram`` adds up: how many tasks ended, and for
    each span of ``names`` (aliased by ``span_expressions``) how many of those that started took at
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


def histogram(rows, name):
    """Add up the figures of ``name`` in ``rows`` (one per state) into one ``Histogram``."""
    buckets = tuple(sum(row[f"{name}_{index}"] for row in rows)
                    for index in range(len(BUCKET_BOUNDS_SECONDS)))
    total = sum((row[f"{name}_sum"] for row in rows if row.get(f"{name}_sum") is not None),
                datetime.timedelta())
    return Histogram(buckets, sum(row[f"{name}_count"] for row in rows), total.total_seconds())
