"""The queue's figures for Prometheus, read from the database at every scrape.

``Collector`` holds no state: every web process serves the same figures, whichever one
a scrape reaches, and nothing is lost when one restarts. Each scrape costs the few
queries of ``atp.stats``, which read the queue table and short ranges of the index on
ended tasks, never the whole history.

Ended tasks are counted over a window (``ATP_METRICS_WINDOW_SECONDS``), as gauges, not
as ``_total`` counters: a count of ended rows read from the database falls whenever
retention purges them or an operator re-enqueues a failed task, and Prometheus takes
every fall of a counter for a restart, turning it into a spike of ``rate()``. Their
run and wait times are gauge histograms over the same window (OpenMetrics'
``gaugehistogram``; a histogram whose ``_gcount`` and ``_gsum`` are gauges in the
classic text format): ``histogram_quantile()`` reads them as they are, without ``rate()``.

Needs ``prometheus-client`` (``pip install django-atp[metrics]``).
"""

import datetime

from django.db import router
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.utils import floatToGoString

from atp import histograms, stats
from atp.conf import conf
from atp.db import database_now
from atp.models import Task, Type
from atp.states import LIVE, TERMINAL


def _families():
    """Return the families the collector yields, empty, by short name."""
    by_type, by_state = ["type"], ["type", "state"]
    return {
        "tasks": GaugeMetricFamily(
            "atp_tasks", "Live tasks (waiting or claimed) by type and state.", labels=by_state),
        "ended": GaugeMetricFamily(
            "atp_tasks_ended", "Tasks that ended within the last atp_metrics_window_seconds, "
            "by type and state.", labels=by_state),
        "window": GaugeMetricFamily(
            "atp_metrics_window_seconds",
            "The window of atp_tasks_ended and of the run and wait histograms "
            "(ATP_METRICS_WINDOW_SECONDS)."),
        "depth": GaugeMetricFamily(
            "atp_queue_depth", "Runnable tasks waiting for a daemon, by type (pull types "
            "and delayed tasks apart).", labels=by_type),
        "delayed": GaugeMetricFamily(
            "atp_queue_delayed", "Waiting tasks not runnable before a later time (eta, "
            "countdown, retry back-off), by type.", labels=by_type),
        "pull": GaugeMetricFamily(
            "atp_pull_queue_depth", "Runnable tasks of pull types waiting for a consumer.",
            labels=by_type),
        "oldest": GaugeMetricFamily(
            "atp_oldest_wait_seconds", "How long the longest-waiting runnable task of a type "
            "has been runnable (0 when none waits).", labels=by_type),
        "run": GaugeHistogramMetricFamily(
            "atp_task_run_seconds", "Run time of the last attempt of the tasks that ended "
            "within the window, by type.", labels=by_type),
        "wait": GaugeHistogramMetricFamily(
            "atp_task_wait_seconds", "Time from creation to the start of the last attempt "
            "of the tasks that ended within the window, by type.", labels=by_type),
        "daemons": GaugeMetricFamily(
            "atp_daemons_live", "Daemons heard from within ATP_DAEMON_TIMEOUT_SECONDS."),
        "workers": GaugeMetricFamily(
            "atp_workers_live", "Worker processes of the live daemons."),
        "runners": GaugeMetricFamily(
            "atp_type_daemons_live", "Live daemons that run a type (have loaded its handler).",
            labels=by_type),
        "paused": GaugeMetricFamily(
            "atp_type_paused", "1 while a type is paused, else 0.", labels=by_type),
    }


def _buckets(histogram):
    bounds = [floatToGoString(bound) for bound in histograms.BUCKET_BOUNDS_SECONDS]
    return [*zip(bounds, histogram.buckets, strict=True), ("+Inf", histogram.count)]


class Collector:
    """A Prometheus collector of the queue's figures, read at each ``collect()``.

    Register it on a registry of your own (``atp.urls`` serves one at ``metrics``), or
    on ``prometheus_client.REGISTRY``: ``describe()`` names its families without a query.
    """

    def describe(self):
        return list(_families().values())

    def collect(self):
        window = datetime.timedelta(seconds=conf.METRICS_WINDOW_SECONDS)
        families = _families()
        now = database_now(router.db_for_read(Task))
        live, waiting, ended = stats.live_counts(), stats.waiting_by_type(), histograms.ended_spans(window)
        empty = stats.Waiting(0, 0)
        for task_type in stats.with_runners(Type.objects.order_by("identifier")):
            label = [task_type.identifier]
            for state in LIVE:
                families["tasks"].add_metric([*label, state], live.get((task_type.pk, state), 0))
            queued = waiting.get(task_type.pk, empty)
            families["pull" if task_type.pull else "depth"].add_metric(label, queued.runnable)
            families["delayed"].add_metric(label, queued.delayed)
            oldest = (now - queued.oldest_since).total_seconds() if queued.oldest_since else 0
            families["oldest"].add_metric(label, max(oldest, 0))
            families["runners"].add_metric(label, task_type.runners)
            families["paused"].add_metric(label, int(task_type.is_paused))
            self._add_ended(families, label, ended.get(task_type.pk))
        families["window"].add_metric([], window.total_seconds())
        totals = stats.live_daemon_totals()
        families["daemons"].add_metric([], totals.daemons)
        families["workers"].add_metric([], totals.workers)
        return list(families.values())

    @staticmethod
    def _add_ended(families, label, ended):
        if ended is None:
            nothing = histograms.Histogram((0,) * len(histograms.BUCKET_BOUNDS_SECONDS), 0, 0.0)
            ended = histograms.Ended({}, nothing, nothing)
        for state in TERMINAL:
            families["ended"].add_metric([*label, state], ended.counts.get(state, 0))
        for name in ("run", "wait"):
            histogram = getattr(ended, name)
            families[name].add_metric(label, _buckets(histogram), histogram.sum_seconds)


def _registry():
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())
    return registry


def exposition(accept=None):
    """Return ``(body, content_type)``: the figures in the format ``accept`` (an HTTP
    ``Accept`` header) asks for, Prometheus' text format or OpenMetrics."""
    encode, content_type = choose_encoder(accept or "")
    return encode(_registry()), content_type
