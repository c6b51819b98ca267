"""The dashboard: the queue at a glance, refreshed in place."""

from django.shortcuts import render
from django.utils import timezone

from atp import stats
from atp.states import LIVE, TERMINAL
from atp.views.access import VIEW, staff_member
from atp.views.charts import UnknownWindow, chart_context, window_of
from atp.views.headers import bad_request
from atp.views.types import type_buttons


@staff_member(VIEW)
def dashboard(request):
    """Show tasks per type and state, the waiting queue, live daemons, recent endings, and
    the charts of the last hour or day (``?window=``)."""
    try:
        window = window_of(request)
    except UnknownWindow as exc:
        return bad_request(str(exc))
    waiting = stats.waiting()
    types = stats.types_with_counts()
    now = timezone.now()
    context = {
        "types": types,
        "waiting": waiting,
        "oldest_wait": now - waiting.oldest_since if waiting.oldest_since else None,
        "daemons": stats.live_daemons(),
        "live_states": LIVE,
        "ended_states": TERMINAL,
        "recent": stats.RECENT,
        "now": now,
        "type_buttons": type_buttons(request.user),
        **chart_context(window, None, sum(task_type.waiting for task_type in types)),
    }
    partial = request.GET.get("partial") == "1"
    return render(request, "atp/_dashboard.html" if partial else "atp/dashboard.html", context)
