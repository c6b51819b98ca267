"""The task pages: the list, one task, its response, its JSON status, and the buttons."""

from dataclasses import dataclass

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from atp import audit, engine
from atp.buttons import applies, delay
from atp.converters import parse_task_id
from atp.engine import batches
from atp.engine.semaphores import describe_holds
from atp.exceptions import InvalidTransition, TaskAlreadyExists, TaskNotFound
from atp.http import is_inline_image, serve_response
from atp.models import Batch, Instance, Response, Type
from atp.presentation import (
    HISTORY_SHOWN,
    describe_inputs,
    failure_text,
    latest_failure_tail,
    refusal_reason,
    timeline,
)
from atp.selection import BadFilter, TaskFilter
from atp.states import TERMINAL, Status
from atp.views.access import CHANGE, DELETE, VIEW, VIEW_INPUTS, VIEW_RESPONSE, staff_member
from atp.views.headers import bad_request

PAGE_SIZE = 50


@dataclass(frozen=True)
class Action:
    """A button of a task's page: its verb, what it did, the permission it takes, and the
    question asked before (None: none). The states it applies to: ``atp.buttons``."""

    verb: object
    done: str
    permission: str = CHANGE
    question: str = None


def _delete(pk, *, by):
    # Its history goes with it: who deleted it is in the admin's log (atp.audit).
    engine.delete_task(pk)


#: The buttons of a task's page, in the order shown, by the name in their address.
ACTIONS = {
    "reenqueue": Action(engine.reenqueue, "re-enqueued"),
    "pause": Action(engine.pause, "paused"),
    "resume": Action(engine.resume, "resumed"),
    "run-now": Action(engine.run_now, "made runnable now"),
    "run-again": Action(engine.run_again, "queued again"),
    "cancel": Action(engine.cancel, "cancelled", question="Cancel task #{pk}?"),
    "delete": Action(_delete, "deleted", DELETE,
                     question="Delete task #{pk} with its inputs, response and history?"),
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


def chosen_tasks(data):
    """Return the filter a form sent and the tasks it selects; raise ``BadFilter``, or
    ``Http404`` for a type that does not exist."""
    chosen = TaskFilter.from_query(data)
    if chosen.type and not Type.objects.filter(identifier=chosen.type).exists():
        raise Http404("no such task type")
    return chosen, chosen.apply(Instance.objects.select_related("type", "daemon"))


@staff_member(VIEW)
def task_list(request):
    """List tasks newest first, filtered, a page at a time without counting them all."""
    try:
        chosen, tasks = chosen_tasks(request.GET)
        before, after = _key(request, "before"), _key(request, "after")
    except (BadFilter, BadRequest) as exc:
        return bad_request(str(exc))
    tasks = tasks.annotate(failure_tail=latest_failure_tail())
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
        "tasks": page, "filter": chosen, "filter_query": chosen.as_query(),
        "types": Type.objects.order_by("identifier").values_list("identifier", flat=True),
        "statuses": Status.choices,
        "newer_than": page[0].pk if page and newer else None,
        "older_than": page[-1].pk if page and older else None,
        "may_change": request.user.has_perm(CHANGE),
        "may_delete": request.user.has_perm(DELETE),
    })


def _buttons(user, instance, eta):
    """Return the buttons of the task's page the user may press, each enabled or greyed."""
    buttons = []
    for name, action in ACTIONS.items():
        if not user.has_perm(action.permission):
            continue
        enabled = applies(name.replace("-", "_"), instance.status, delayed=eta is not None)
        buttons.append({
            "verb": name, "label": name.replace("reenqueue", "re-enqueue").replace("-", " "),
            "enabled": enabled, "danger": action.question is not None,
            "question": action.question and action.question.format(pk=instance.pk),
        })
    return buttons


@staff_member(VIEW)
def task_detail(request, pk):
    """Show one task: what it is, its inputs, progress, history, response and buttons."""
    instance = get_object_or_404(Instance.objects.select_related("type", "daemon"), pk=pk)
    history = instance.log_records.order_by("-id")[:HISTORY_SHOWN]
    response = Response.objects.filter(pk=pk).defer("data").first()
    eta = delay(instance)
    context = {
        "task": instance,
        "timeline": timeline(reversed(list(history)), instance.status, timezone.now()),
        "history_total": instance.log_records.count(),
        "response": response,
        "response_is_image": response is not None and is_inline_image(response.content_type),
        "may_view_response": request.user.has_perm(VIEW_RESPONSE),
        "is_final": instance.is_terminal,
        "batch": batch_summary(instance.batch_id),
        "semaphores": describe_holds(pk),
        "eta": eta,
        # The buttons live in the refreshed part: they grey as the state moves on.
        "buttons": _buttons(request.user, instance, eta),
    }
    if request.GET.get("partial") == "1":
        return render(request, "atp/_task_live.html", context)
    may_view_inputs = request.user.has_perm(VIEW_INPUTS)
    context.update(
        inputs=describe_inputs(pk) if may_view_inputs else None,
        may_view_inputs=may_view_inputs,
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
        "error": failure_text(pk) if task.status == Status.FAILED else None,
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
@staff_member(VIEW)
def task_action(request, pk, verb):
    """Apply a button's verb to the task, then go back to its page saying how it went
    (to the new task's page after a run again, to the list after a delete)."""
    if verb not in ACTIONS:
        raise Http404("no such action")
    action = ACTIONS[verb]
    if not request.user.has_perm(action.permission):
        raise PermissionDenied
    names = audit.task_names([pk])  # before a delete takes them
    try:
        result = action.verb(pk, by=request.user)
    except TaskNotFound:
        raise Http404("no such task") from None
    except (InvalidTransition, TaskAlreadyExists) as exc:
        messages.error(request, f"Task #{pk} was not {action.done}: {refusal_reason(exc)}.")
        return redirect("atp:task_detail", pk=pk)
    audit.record(request.user, Instance, names, action.done.capitalize(),
                 deleted=verb == "delete")
    if verb == "delete":
        messages.success(request, f"Task #{pk} deleted.")
        return redirect("atp:task_list")
    if verb == "run-again":
        messages.success(request, f"Task #{pk} queued again as task #{result.pk}.")
        return redirect("atp:task_detail", pk=result.pk)
    messages.success(request, f"Task #{pk} {action.done}.")
    return redirect("atp:task_detail", pk=pk)
