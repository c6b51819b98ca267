"""The task pages: the list, one task, its response, its JSON status, and the buttons."""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from atp import audit, engine
from atp.converters import parse_task_id
from atp.engine import batches
from atp.exceptions import InvalidTransition, TaskAlreadyExists, TaskNotFound
from atp.http import is_inline_image, serve_response
from atp.models import Batch, Instance, Response, Type
from atp.presentation import HISTORY_SHOWN, describe_inputs, refusal_reason, timeline
from atp.states import IN_FLIGHT, LIVE, TERMINAL, Status
from atp.views.access import CHANGE, VIEW, VIEW_INPUTS, VIEW_RESPONSE, staff_member
from atp.views.headers import bad_request

PAGE_SIZE = 50

#: The buttons of a task's page: verb, label, and the states it applies to.
ACTIONS = {
    "reenqueue": (engine.reenqueue, "re-enqueued", (*IN_FLIGHT, Status.FAILED, Status.CANCELLED)),
    "pause": (engine.pause, "paused", (Status.RUNNING,)),
    "resume": (engine.resume, "resumed", (Status.PAUSED,)),
    "cancel": (engine.cancel, "cancelled", LIVE),
}


class BadRequest(Exception):
    pass


def _key(request, name):
    value = request.GET.get(name, "")
    if not value:
        return None
    number = parse_task_id(value)
    if number is None:
        raise BadRequest(f"{name} must be a task number")
    return number


@staff_member(VIEW)
def task_list(request):
    """List tasks newest first, by type and state, a page at a time without counting them all."""
    tasks = Instance.objects.select_related("type", "daemon")
    type_name, status = request.GET.get("type", ""), request.GET.get("status", "")
    if "\x00" in type_name:  # PostgreSQL refuses NUL in any string
        return bad_request("type names hold no NUL character")
    if type_name:
        tasks = tasks.filter(type=get_object_or_404(Type, identifier=type_name))
    if status:
        if status not in Status.values:
            return bad_request(f"unknown state {status!r}")
        tasks = tasks.filter(status=status)
    try:
        before, after = _key(request, "before"), _key(request, "after")
    except BadRequest as exc:
        return bad_request(str(exc))
    if after is not None:
        page = list(tasks.filter(pk__gt=after).order_by("pk")[:PAGE_SIZE + 1])[::-1]
        newer, older = len(page) > PAGE_SIZE, True
        page = page[-PAGE_SIZE:] if newer else page
    else:
        page = list((tasks if before is None else tasks.filter(pk__lt=before))
                    .order_by("-pk")[:PAGE_SIZE + 1])
        newer, older = before is not None, len(page) > PAGE_SIZE
        page = page[:PAGE_SIZE]
    return render(request, "atp/task_list.html", {
        "tasks": page,
        "types": Type.objects.order_by("identifier").values_list("identifier", flat=True),
        "statuses": Status.choices,
        "type_name": type_name, "status": status,
        "newer_than": page[0].pk if page and newer else None,
        "older_than": page[-1].pk if page and older else None,
    })


@staff_member(VIEW)
def task_detail(request, pk):
    """Show one task: what it is, its inputs, progress, history, response and buttons."""
    instance = get_object_or_404(Instance.objects.select_related("type", "daemon"), pk=pk)
    history = instance.log_records.order_by("-id")[:HISTORY_SHOWN]
    response = Response.objects.filter(pk=pk).defer("data").first()
    context = {
        "task": instance,
        "timeline": timeline(reversed(list(history)), instance.status, timezone.now()),
        "history_total": instance.log_records.count(),
        "response": response,
        "response_is_image": response is not None and is_inline_image(response.content_type),
        "may_view_response": request.user.has_perm(VIEW_RESPONSE),
        "is_final": instance.is_terminal,
        "batch": batch_summary(instance.batch_id),
    }
    if request.GET.get("partial") == "1":
        return render(request, "atp/_task_live.html", context)
    can_change = request.user.has_perm(CHANGE)
    may_view_inputs = request.user.has_perm(VIEW_INPUTS)
    context.update(
        inputs=describe_inputs(pk) if may_view_inputs else None,
        may_view_inputs=may_view_inputs,
        buttons=[(verb, verb.replace("reenqueue", "re-enqueue"))
                 for verb, (_, _, states) in ACTIONS.items()
                 if can_change and instance.status in states],
    )
    return render(request, "atp/task_detail.html", context)


def batch_summary(batch_id):
    """Return the progress of batch ``batch_id`` for the task page (None: no batch)."""
    if batch_id is None:
        return None
    found = Batch.objects.filter(pk=batch_id).first()
    if found is None:
        return None
    counts = batches.progress([batch_id]).get(batch_id, {})
    return {
        "label": str(found), "total": sum(counts.values()),
        "ended": sum(count for status, count in counts.items() if status in TERMINAL),
        "failed": counts.get(Status.FAILED, 0), "cancelled": counts.get(Status.CANCELLED, 0),
        "completed": found.completed, "completion_id": found.completion_id,
    }


@staff_member(VIEW)
def task_status(request, pk):
    """Return the task's state, progress, times and response URL as JSON, for pollers."""
    task = get_object_or_404(Instance.objects.select_related("type"), pk=pk)
    has_response = (request.user.has_perm(VIEW_RESPONSE)
                    and Response.objects.filter(pk=pk).exists())
    return JsonResponse({
        "id": task.pk, "type": task.type.identifier, "identifier": task.identifier,
        "status": task.status, "attempt": task.attempt, "restarts": task.restarts,
        "progress": {
            "done": task.progress_done, "total": task.progress_total,
            "fraction": task.progress_fraction, "message": task.progress_message,
        },
        "created": task.created, "updated": task.updated,
        "started": task.started, "finished": task.finished,
        "response_url": reverse("atp:task_response", args=[pk]) if has_response else None,
        "detail_url": reverse("atp:task_detail", args=[pk]),
    })


@staff_member(VIEW)
def task_response(request, pk):
    """Send the task's response: shown when harmless (text, JSON, images), else downloaded."""
    if not request.user.has_perm(VIEW_RESPONSE):
        raise PermissionDenied
    return serve_response(get_object_or_404(Response, pk=pk), f"task-{pk}")


@require_POST
@staff_member(CHANGE)
def task_action(request, pk, verb):
    """Apply a button's verb to the task, then go back to its page saying how it went."""
    if verb not in ACTIONS:
        raise Http404("no such action")
    apply, done, _ = ACTIONS[verb]
    try:
        apply(pk, by=request.user)
    except TaskNotFound:
        raise Http404("no such task") from None
    except (InvalidTransition, TaskAlreadyExists) as exc:
        messages.error(request, f"Task #{pk} was not {done}: {refusal_reason(exc)}.")
    else:
        audit.record(request.user, Instance, audit.task_names([pk]), done.capitalize())
        messages.success(request, f"Task #{pk} {done}.")
    return redirect("atp:task_detail", pk=pk)
