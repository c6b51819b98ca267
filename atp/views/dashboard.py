"""The dashboard: the queue at a glance, refreshed in place."""

import datetime

from django.shortcuts import render
from django.utils import timezone

from atp import stats
from atp.conf import conf
from atp.states import LIVE, TERMINAL
from atp.views.access import VIEW, staff_member
from atp.views.charts import UnknownWindow, chart_context, window_of
from atp.views.headers import bad_request
from atp.views.types import type_buttons


@staff_member(VIEW)
def dashboard(request):
    """Show tasks per type and state, the waiting queue (pull and paused types' tasks
    apart), the daemons (live, silent or dead with tasks), schedules, open batches, recent
    endings, and the charts of the last hour or day (``?window=``)."""
    try:
        window = window_of(request)
    except UnknownWindow as exc:
        return bad_request(str(exc))
    queue = stats.queue(stats.waiting_by_type())
    types = stats.types_with_counts()
    daemons = stats.watched_daemons()
    now = timezone.now()
    context = {
        "types": types,
        "waiting": queue,
        "oldest_wait": now - queue.oldest_since if queue.oldest_since else None,
        "daemons": daemons,
        "live_daemons": sum(daemon.is_live for daemon in daemons),
        "daemon_timeout": datetime.timedelta(seconds=conf.DAEMON_TIMEOUT_SECONDS),
        "schedules": stats.schedules(),
        "batches": stats.open_batches(),
        "live_states": LIVE,
        "ended_states": TERMINAL,
        "recent": stats.RECENT,
        "now": now,
        "type_buttons": type_buttons(request.user),
        **chart_context(window, None, sum(task_type.waiting for task_type in types)),
    }
    partial = request.GET.get("partial") == "1"
    return render(request, "atp/_dashboard.html" if partial else "atp/dashboard.html", context)
