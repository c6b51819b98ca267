"""The demo's pages: the start page with a button per scenario, and the quilt.

They carry atp's headers (its Content-Security-Policy among them): the quilt is drawn
by a static script, nothing inline.
"""

from django.contrib import messages
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

import atp
from atp.views.access import CHANGE, VIEW, staff_member
from atp_demo import scenarios


def _to_task(task):
    return reverse("atp:task_detail", args=[task.pk])


def _to_type(identifier):
    return f"{reverse('atp:task_list')}?type={identifier}"


def _quilt(_):
    return reverse("demo:quilt", args=[scenarios.start_quilt().pk])


def _ticking(_):
    scenarios.start_ticking()
    return _to_type("demo.tick")


def _limited(_):
    scenarios.start_limited()
    return _to_type("demo.limited")


def _no_more_ticks(request):
    stopped = scenarios.stop_ticking()
    messages.info(request, "The schedule demo-tick is deleted." if stopped else
                  "The schedule demo-tick was not running.")
    return reverse("demo:home")


#: Each button of the start page: its name, and what it starts and where it goes then.
SCENARIOS = {
    "quilt": _quilt,
    "fractal": lambda _: _to_task(scenarios.start_fractal()),
    "flaky": lambda _: _to_task(scenarios.start_flaky()),
    "hang": lambda _: _to_task(scenarios.start_hang()),
    "limited": _limited,
    "ticking": _ticking,
    "no-more-ticks": _no_more_ticks,
}


@staff_member(VIEW)
def home(request):
    """The start page: what is on show, a button per scenario, links to atp's pages."""
    hang, limited = atp.get_type("demo.hang"), atp.get_type("demo.limited")
    return render(request, "atp_demo/home.html", {
        "hang_timeout": round(hang.timeout.total_seconds()), "hang_restarts": hang.max_restarts,
        "limited_every": round(1 / limited.rate, 1),
        "quilt_side": scenarios.QUILT_SIDE, "quilt_failures": scenarios.QUILT_FAILURES,
        "limited_tasks": scenarios.LIMITED_TASKS, "tick_seconds": scenarios.TICK_SECONDS,
        "ticking": scenarios.is_ticking(),
    })


@require_POST
@staff_member(CHANGE)
def start(request, scenario):
    """Start ``scenario`` and show it playing out."""
    if scenario not in SCENARIOS:
        raise Http404("no such scenario")
    return redirect(SCENARIOS[scenario](request))


@staff_member(VIEW)
def quilt(request, pk):
    """The quilt of batch ``pk``, filled in live by ``atp_demo/quilt.js``."""
    if scenarios.quilt_state(pk) is None:
        raise Http404("no such quilt")
    side = scenarios.QUILT_SIDE
    return render(request, "atp_demo/quilt.html", {
        "batch_id": pk, "rows": [range(row * side, (row + 1) * side) for row in range(side)],
    })


@staff_member(VIEW)
def quilt_state(request, pk):
    """The quilt of batch ``pk`` as JSON, for its page."""
    state = scenarios.quilt_state(pk)
    if state is None:
        raise Http404("no such quilt")
    return JsonResponse(state)
