"""Bulk actions by filter: every task the task list's filter selects, re-enqueued,
cancelled or deleted, once the operator has confirmed how many that is."""

from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from atp import engine
from atp.bulk import apply_to_each, delete_each_ended
from atp.selection import BadFilter
from atp.views.access import CHANGE, DELETE, VIEW, staff_member
from atp.views.headers import bad_request
from atp.views.tasks import chosen_tasks

#: Each bulk action: the verb applied to each task (None: deleted in batches), what it
#: did, the permission it takes, and how its button says it.
BULK_ACTIONS = {
    "reenqueue": (engine.reenqueue, "re-enqueued", CHANGE, "Re-enqueue"),
    "cancel": (engine.cancel, "cancelled", CHANGE, "Cancel"),
    "delete": (None, "deleted", DELETE, "Delete"),
}


@require_POST
@staff_member(VIEW)
def task_bulk(request):
    """Ask how many tasks the filter selects and whether to go on; once confirmed, apply
    the action to each of them in batches and go back to the list saying how it went."""
    name = request.POST.get("action", "")
    if name not in BULK_ACTIONS:
        return bad_request("unknown bulk action")
    verb, done, permission, label = BULK_ACTIONS[name]
    if not request.user.has_perm(permission):
        raise PermissionDenied
    try:
        chosen, tasks = chosen_tasks(request.POST)
    except BadFilter as exc:
        return bad_request(str(exc))
    if request.POST.get("confirmed") != "yes":
        return render(request, "atp/task_bulk.html", {
            "action": name, "label": label, "count": tasks.count(), "filter": chosen,
            "fields": chosen.as_query(), "list_url": _list_url(chosen),
        })
    if verb is None:
        outcome = delete_each_ended(tasks, engine.delete_ended, request.user)
    else:
        outcome = apply_to_each(tasks, verb, request.user, done)
    level = (messages.ERROR if outcome.failed
             else messages.WARNING if outcome.refused else messages.SUCCESS)
    messages.add_message(request, level, outcome.message(done))
    return redirect(_list_url(chosen))


def _list_url(chosen):
    query = urlencode(chosen.as_query())
    return reverse("atp:task_list") + (f"?{query}" if query else "")
