"""Steering a task type from atp's pages: pause, resume, purge (the dashboard's buttons)."""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from atp import audit, engine
from atp.models import Type
from atp.views.access import CHANGE, VIEW, staff_member

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


@require_POST
@staff_member(VIEW)
def type_action(request, pk, verb):
    """Apply a type's button, then go back to the dashboard saying how it went."""
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
    return redirect("atp:dashboard")
