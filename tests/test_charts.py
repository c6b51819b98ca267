import datetime

import pytest
from django.utils import timezone

from atp import charts, histograms, trends

MINUTE = datetime.timedelta(minutes=1)
NONE = histograms.Histogram((0,) * len(histograms.BUCKET_BOUNDS_SECONDS), 0, 0.0)


def histogram(seconds):
    """A histogram of one task that waited ``seconds``."""
    return histograms.Histogram(tuple(int(seconds <= bound) for bound in histograms.BUCKET_BOUNDS_SECONDS), 1, seconds)


def activity(points, step=MINUTE, **series):
    start = datetime.datetime(2026, 11, 26, 8, 0, tzinfo=datetime.UTC)
    figures = {name: series.get(name, (0,) * points) for name in ("finished", "failed", "retried", "depth")}
    return trends.Activity(starts=tuple(start + index * step for index in range(points)), step=step,
                          wait=series.get("wait", (NONE,) * points), **figures)


def by_key(drawn):
    return {chart.key: chart for chart in drawn}


def test_each_point_carries_its_figures_and_says_them_with_the_time_zone(settings):
    settings.TIME_ZONE = "Europe/Paris"
    timezone.activate("Europe/Paris")
    try:
        drawn = by_key(charts.draw(activity(60, finished=(0,) * 59 + (7,), retried=(1,) + (0,) * 59),
                                   charts.WINDOWS["hour"]))
    finally:
        timezone.deactivate()
    last = drawn["throughput"].points[-1]
    assert dict(last.data) == {"start": "2026-11-26T08:59:00+00:00", "finished": 7, "failed": 0, "retried": 0}
    assert last.title == "09:59 CET: 7 finished, 0 failed, 0 retried"
    assert [label for _, label in drawn["throughput"].x_ticks] == ["09:00", "09:10", "09:20", "09:30", "09:40", "09:50"]
    assert [series.label for series in drawn["throughput"].legend] == ["finished", "failed", "retried"]
    assert [series.key for series in drawn["wait"].legend] == ["p50", "p95"]


def test_a_day_shows_rates_per_minute_of_each_quarter_hour():
    drawn = by_key(charts.draw(activity(96, step=15 * MINUTE, finished=(30,) + (0,) * 95),
                               charts.WINDOWS["day"]))
    first = drawn["throughput"].points[0]
    assert dict(first.data)["finished"] == 30
    assert first.title.startswith("08:00–08:15 UTC: 30 finished") and "per minute: 2, 0, 0" in first.title
    top = dict((label, y) for y, label in drawn["throughput"].y_ticks)
    path = drawn["throughput"].lines[0].path  # finished: 2 a minute in its first point
    assert path.startswith("M") and path.split(" L")[0].endswith(f",{top['2']}")


def test_the_wait_line_breaks_where_no_task_ended():
    waits = (histogram(0.3), histogram(0.3), NONE, histogram(20), NONE)
    drawn = by_key(charts.draw(activity(5, wait=waits), charts.WINDOWS["hour"]))
    p50 = drawn["wait"].lines[0]
    assert p50.path.count("M") == 1 and p50.path.count("L") == 1  # the first two points
    assert len(p50.dots) == 1  # the lone fourth
    assert dict(drawn["wait"].points[2].data)["p50"] == "" and "no started task ended" in drawn["wait"].points[2].title
    assert dict(drawn["wait"].points[3].data)["p95"] == "29.000"  # in (10 s, 30 s]: 95 % of the way
    labels = [label for _, label in drawn["wait"].y_ticks]
    assert labels[0] == "100 ms" and labels[-1] == "1 min"


@pytest.mark.parametrize("value, axis", [(0, (4, 1)), (3, (4, 1)), (7, (8, 2)), (14, (15, 5)),
                                         (23, (25, 5)), (240, (250, 50)), (1000, (1000, 200))])
def test_axes_end_at_a_round_figure_in_at_most_five_steps(value, axis):
    assert charts._nice_axis(value) == axis


def test_a_days_low_rates_get_an_axis_of_their_own():
    drawn = by_key(charts.draw(activity(96, step=15 * MINUTE, finished=(2,) + (0,) * 95),
                               charts.WINDOWS["day"]))
    assert [label for _, label in drawn["throughput"].y_ticks] == ["0", "0.1", "0.2", "0.3", "0.4"]
    assert "per minute: 0.13, 0, 0" in drawn["throughput"].points[0].title
