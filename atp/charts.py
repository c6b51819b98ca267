"""The charts of atp's pages: the queue's history (``atp.trends.activity``) drawn by the
server as inline SVG, so that they need no script, no library and nothing the pages'
Content-Security-Policy refuses (no inline style: the colours are classes of
``atp.css``).

Pure: figures in, geometry out. ``atp/_chart.html`` writes the geometry as SVG; each
point carries its figures in ``data-`` attributes and says them in a ``<title>``
(shown on hover, read by screen readers and tests).
"""

import datetime
import math
from dataclasses import dataclass

from django.utils import timezone

from atp.presentation import format_duration

#: The drawing's own units (its ``viewBox``); the page scales it to the width it has.
WIDTH, HEIGHT = 560, 210
LEFT, RIGHT, TOP, BOTTOM = 46, 10, 10, 24


@dataclass(frozen=True)
class Window:
    """What the switch of the charts offers: how far back, a point per ``step``, and a
    label on the time axis every ``tick``."""

    name: str
    label: str
    span: datetime.timedelta
    step: datetime.timedelta
    tick: datetime.timedelta
    step_label: str


WINDOWS = {
    "hour": Window("hour", "last hour", datetime.timedelta(hours=1),
                   datetime.timedelta(minutes=1), datetime.timedelta(minutes=10), "minute"),
    "day": Window("day", "last day", datetime.timedelta(days=1),
                  datetime.timedelta(minutes=15), datetime.timedelta(hours=3), "15 minutes"),
}
DEFAULT_WINDOW = "hour"

#: The wait's axis is logarithmic: its labels, in seconds.
WAIT_TICKS = ((0.001, "1 ms"), (0.01, "10 ms"), (0.1, "100 ms"), (1, "1 s"), (10, "10 s"),
              (60, "1 min"), (600, "10 min"), (3600, "1 h"), (14400, "4 h"))


@dataclass(frozen=True)
class Series:
    """One line of a chart: its name (its class and data attribute), what the legend
    says, and its value at each point (None: nothing to show there)."""

    key: str
    label: str
    description: str
    values: tuple


@dataclass(frozen=True)
class Line:
    key: str
    path: str
    dots: tuple  # (x, y) of the points with no neighbour to draw a line to


@dataclass(frozen=True)
class Point:
    """A point of the time axis: where its band lies, its figures and what it says."""

    x: float
    width: float
    data: tuple  # (name, value) pairs: data-name="value"
    title: str


@dataclass(frozen=True)
class Chart:
    key: str
    title: str
    legend: tuple
    lines: tuple
    y_ticks: tuple  # (y, label)
    x_ticks: tuple  # (x, label)
    points: tuple
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM
    plot_height: int = HEIGHT - BOTTOM - TOP


def draw(activity, window):
    """Return the charts of ``activity`` (an ``atp.trends.Activity`` over ``window``):
    tasks per minute, the queue's depth, and the wait before start."""
    times = [_label_of(start, window) for start in activity.starts]
    return (_throughput(activity, window, times), _depth(activity, window, times),
            _wait(activity, window, times))


def time_zone_name():
    """Return the name of the time zone the charts' times are in (the current one)."""
    return timezone.get_current_timezone_name()


def _throughput(activity, window, times):
    per_minute = window.step / datetime.timedelta(minutes=1)
    names = {"finished": "ended well", "failed": "failed for good",
             "retried": "went back to the queue after an attempt"}
    series = [Series(key, key, description,
                     tuple(count / per_minute for count in getattr(activity, key)))
              for key, description in names.items()]
    # Over a day, rates per minute below 1 are common: their axis may end lower.
    axis = _nice_axis(max(max(s.values) for s in series), smallest=4 if per_minute == 1 else 0.4)
    points = []
    for index, label in enumerate(times):
        counts = {key: getattr(activity, key)[index] for key in names}
        said = ", ".join(f"{counts[key]} {key}" for key in names)
        if per_minute > 1:
            said += " (per minute: " + ", ".join(_number(counts[key] / per_minute) for key in names) + ")"
        points.append(_point(activity, index, counts, f"{label}: {said}"))
    return _chart("throughput", "Tasks per minute", series, _linear(axis[0]), _linear_ticks(axis),
                  points, window, activity)


def _depth(activity, window, times):
    description = f"waiting to be claimed at the end of each {window.step_label}, delayed tasks included"
    series = [Series("depth", "waiting", description, activity.depth)]
    axis = _nice_axis(max(activity.depth))
    points = [_point(activity, index, {"depth": depth}, f"{label}: {depth} waiting at its end")
              for index, (label, depth) in enumerate(zip(times, activity.depth, strict=True))]
    return _chart("depth", "Queue depth", series, _linear(axis[0]), _linear_ticks(axis), points,
                  window, activity)


def _wait(activity, window, times):
    quantiles = {key: tuple(histogram.quantile(q) for histogram in activity.wait)
                 for key, q in (("p50", 0.5), ("p95", 0.95))}
    series = [Series("p50", "p50", "half the tasks that ended waited less", quantiles["p50"]),
              Series("p95", "p95", "95 % of them waited less", quantiles["p95"])]
    shown = [value for values in quantiles.values() for value in values if value]
    low = max((tick for tick, _ in WAIT_TICKS if tick <= min(shown, default=0.01)), default=0.001)
    high = min((tick for tick, _ in WAIT_TICKS if tick >= max(shown, default=1)), default=14400)
    high = max(high, low * 10)
    span = math.log10(high) - math.log10(low)

    def scale(value):
        value = min(max(value, low), high)
        return HEIGHT - BOTTOM - (math.log10(value) - math.log10(low)) / span * (HEIGHT - BOTTOM - TOP)

    ticks = tuple((round(scale(tick), 2), label) for tick, label in WAIT_TICKS if low <= tick <= high)
    points = []
    for index, (label, histogram) in enumerate(zip(times, activity.wait, strict=True)):
        p50, p95 = quantiles["p50"][index], quantiles["p95"][index]
        if histogram.count:
            said = (f"{label}: p50 {_seconds(p50)}, p95 {_seconds(p95)} "
                    f"({histogram.count} started tasks ended)")
        else:
            said = f"{label}: no started task ended"
        data = {"ended": histogram.count, "p50": _decimal(p50), "p95": _decimal(p95)}
        points.append(_point(activity, index, data, said))
    return _chart("wait", "Wait before start", series, scale, ticks, points, window, activity)


def _chart(key, title, series, scale, y_ticks, points, window, activity):
    band = (WIDTH - RIGHT - LEFT) / len(activity.starts)
    lines = tuple(_line(s, scale, band) for s in series)
    return Chart(key=key, title=title, legend=tuple(series), lines=lines, y_ticks=y_ticks,
                 x_ticks=_x_ticks(activity, band, window), points=tuple(points))


def _point(activity, index, data, title):
    band = (WIDTH - RIGHT - LEFT) / len(activity.starts)
    pairs = (("start", activity.starts[index].isoformat()),
             *((name, "" if value is None else value) for name, value in data.items()))
    return Point(x=round(LEFT + index * band, 2), width=round(band, 2), data=pairs, title=title)


def _line(series, scale, band):
    """Return the SVG path of ``series``: lines between the points that have a value."""
    path, dots, run = [], [], []
    for index, value in enumerate((*series.values, None)):
        if value is not None:
            run.append((round(LEFT + (index + 0.5) * band, 2), round(scale(value), 2)))
            continue
        if len(run) == 1:
            dots.append(run[0])
        elif run:
            path.append("M" + " L".join(f"{x},{y}" for x, y in run))
        run = []
    return Line(series.key, " ".join(path), tuple(dots))


def _linear(top):
    return lambda value: HEIGHT - BOTTOM - value / top * (HEIGHT - BOTTOM - TOP)


def _linear_ticks(axis):
    top, step = axis
    scale = _linear(top)
    return tuple((round(scale(step * n), 2), _number(step * n)) for n in range(round(top / step) + 1))


def _nice_axis(value, smallest=4):
    """Return ``(top, step)`` of an axis that reaches ``value``: at most five steps of 1,
    2 or 5 × a power of ten, and four steps up to ``smallest`` at least."""
    if value <= smallest:
        return smallest, smallest / 4
    power = 10 ** math.floor(math.log10(value / 5))
    for factor in (1, 2, 5, 10):
        steps = math.ceil(value / (factor * power))
        if steps <= 5:
            return steps * factor * power, factor * power
    raise AssertionError(value)  # 10 × power always fits


def _x_ticks(activity, band, window):
    """Return a label at each point whose start, in the current time zone, is a whole
    ``window.tick`` past midnight."""
    every = window.tick // datetime.timedelta(minutes=1)
    ticks = []
    for index, start in enumerate(activity.starts):
        local = timezone.localtime(start)
        if (local.hour * 60 + local.minute) % every == 0:
            ticks.append((round(LEFT + index * band, 2), local.strftime("%H:%M")))
    return tuple(ticks)


def _label_of(start, window):
    local = timezone.localtime(start)
    label = local.strftime("%H:%M")
    if window.step > datetime.timedelta(minutes=1):
        label += "–" + timezone.localtime(start + window.step).strftime("%H:%M")
    return f"{label} {local.tzname()}"


def _number(value):
    value = round(value, 2)
    return f"{value:.0f}" if value == int(value) else f"{value:g}"


def _seconds(value):
    return format_duration(datetime.timedelta(seconds=value))


def _decimal(value):
    return None if value is None else f"{value:.3f}"
