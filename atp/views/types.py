"""A task type on atp's pages: its own page, with its charts, and its buttons (pause,
resume, purge), on that page and the dashboard's rows."""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from atp import audit, engine, stats
from atp.models import Type
from atp.states import LIVE, TERMINAL
from atp.views.access import CHANGE, VIEW, staff_member
from atp.views.charts import UnknownWindow, chart_context, window_of
from atp.views.headers import bad_request

#: What a type's button does: the verb, what it says once done, the permission it needs
#: (pausing and resuming change the type; purging cancels tasks).
TYPE_ACTIONS = {
    "pause": (engine.pause_type, "paused", "atp.change_type"),
    "resume": (engine.resume_type, "resumed", "atp.change_type"),
    "purge": (None, "purged", CHANGE),
}


def type_buttons(user):
    """Return the verbs of the types' buttons ``user`` may press."""
    return [verb for verb, (_, _, permission) in TYPE_ACTIONS.items() if user.has_perm(permission)]


@staff_member(VIEW)
def type_detail(request, pk):
    """Show a type: its tasks by state, its waiting queue, its parameters, and the charts
    of its tasks over the last hour or day (``?window=``)."""
    try:
        window = window_of(request)
    except UnknownWindow as exc:
        return bad_request(str(exc))
    typed = stats.types_with_counts(Type.objects.filter(pk=pk))
    if not typed:
        raise Http404("no such task type")
    [task_type] = typed
    waiting = stats.waiting_by_type().get(pk, stats.Waiting(0, 0))
    now = timezone.now()
    context = {
        "type": task_type,
        "waiting": waiting,
        "oldest_wait": now - waiting.oldest_since if waiting.oldest_since else None,
        "live_states": LIVE,
        "ended_states": TERMINAL,
        "now": now,
        "type_buttons": type_buttons(request.user),
        "type_name": task_type.identifier,
        **chart_context(window, [task_type.pk], task_type.waiting),
    }
    partial = request.GET.get("partial") == "1"
    return render(request, "atp/_type_live.html" if partial else "atp/type_detail.html", context)


@require_POST
@staff_member(VIEW)
def type_action(request, pk, verb):
    """Apply a type's button, then go back to the dashboard (or to the type's page, when
    pressed there: ``back=type``) saying how it went."""
    if verb not in TYPE_ACTIONS:
        raise Http404("no such action")
    apply, done, permission = TYPE_ACTIONS[verb]
    if not request.user.has_perm(permission):
        raise PermissionDenied
    task_type = get_object_or_404(Type, pk=pk)
    if verb == "purge":
        cancelled = engine.purge_type(
            task_type, f"purged by {request.user.get_username()} from atp's pages",
            by=request.user)
        messages.success(request, f"Type {task_type.identifier} purged: {cancelled} waiting "
                                  "task(s) cancelled.")
    else:
        apply(task_type.identifier)
        messages.success(request, f"Type {task_type.identifier} {done}.")
    audit.record(request.user, Type, [(task_type.pk, task_type)], done.capitalize())
    if request.POST.get("back") == "type":
        return redirect("atp:type_detail", task_type.pk)
    return redirect("atp:dashboard")
