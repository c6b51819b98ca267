"""The charts of the dashboard and of a type's page: which window, and their figures."""

from django.db import router

from atp import charts, trends
from atp.db import database_now
from atp.models import Instance


class UnknownWindow(ValueError):
    """The address names a window the charts do not have."""


def window_of(request):
    """Return the ``charts.Window`` the request asks for (``?window=hour|day``, default
    the hour); raise ``UnknownWindow`` for another."""
    name = request.GET.get("window") or charts.DEFAULT_WINDOW
    if name not in charts.WINDOWS:
        raise UnknownWindow(f"unknown window {name!r}: choose {' or '.join(charts.WINDOWS)}")
    return charts.WINDOWS[name]


def chart_context(window, type_ids, waiting_now):
    """Return what ``atp/_charts.html`` shows: the charts of the tasks of ``type_ids``
    (None: every type) over ``window``, their queue reckoned back from ``waiting_now``."""
    now = database_now(router.db_for_read(Instance))
    activity = trends.activity(now, window.span, window.step, type_ids, waiting_now)
    return {
        "window": window,
        "windows": list(charts.WINDOWS.values()),
        "charts": charts.draw(activity, window),
        "time_zone": charts.time_zone_name(),
    }
