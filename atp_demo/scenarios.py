"""The scenarios of the demo's start page: what each button enqueues, and the quilt's
state as its page draws it.

The figures below are the demo's pace; the tests shorten them (the daemon takes them
from the tasks' inputs, so only the process that starts a scenario needs them).
"""

import random

from django.db import transaction

import atp
from atp.exceptions import ScheduleNotFound
from atp.models import Batch, Instance, Response, Schedule
from atp.states import TERMINAL, Status

#: The quilt: SIDE × SIDE squares, each coloured in between these seconds, FAILURES of
#: them failing on purpose.
QUILT_SIDE = 8
QUILT_SECONDS = (0.5, 3.0)
QUILT_FAILURES = 4
#: The processing job's image, and the seconds its rendering is spread over.
FRACTAL = {"width": 480, "height": 360, "iterations": 200, "seconds": 12}
#: How many tasks the rate-limited scenario enqueues at once.
LIMITED_TASKS = 8
#: The schedule's name and how often it enqueues a tick.
TICK_SCHEDULE = "demo-tick"
TICK_SECONDS = 5


def start_quilt():
    """Enqueue one batch of a task per square; return the ``Batch``."""
    squares = QUILT_SIDE * QUILT_SIDE
    failing = set(random.sample(range(squares), min(QUILT_FAILURES, squares)))
    # One transaction: the squares and the batch's seal are written together, at the commit.
    with transaction.atomic(), atp.batch("demo.quilt.done", name="quilt") as batch:
        # In a random order, the order they are claimed in: the quilt fills in all over.
        for square in random.sample(range(squares), squares):
            atp.enqueue("demo.quilt.square", {
                "square": square, "side": QUILT_SIDE, "fail": square in failing,
                "seconds": round(random.uniform(*QUILT_SECONDS), 2),
            }, identifier=square_identifier(batch.pk, square))
    return batch


def square_identifier(batch_id, square):
    return f"quilt-{batch_id}-{square}"


def quilt_state(batch_id):
    """Return the quilt of batch ``batch_id`` as its page draws it: each square's state and
    colour, the counts, and whether its on-complete task has ended; None if there is none."""
    batch = Batch.objects.filter(pk=batch_id, on_complete="demo.quilt.done").first()
    if batch is None:
        return None
    members = Instance.objects.filter(batch_id=batch_id).values_list("pk", "identifier", "status")
    by_square = {int(identifier.rsplit("-", 1)[1]): (pk, status) for pk, identifier, status in members}
    colours = {response.pk: response.json().get("colour")
               for response in Response.objects.filter(
                   pk__in=[pk for pk, status in by_square.values() if status == Status.FINISHED])}
    squares = [{"status": status, "colour": colours.get(pk)}
               for _, (pk, status) in sorted(by_square.items())]
    completion = (Instance.objects.filter(pk=batch.completion_id).values_list("status", flat=True)
                  .first() if batch.completion_id else None)
    return {
        "squares": squares,
        "coloured": sum(square["status"] == Status.FINISHED for square in squares),
        "failed": sum(square["status"] == Status.FAILED for square in squares),
        "completion": batch.completion_id,
        "done": completion in TERMINAL,
    }


def start_fractal():
    """Enqueue the processing job; return its task."""
    return atp.enqueue("demo.fractal", dict(FRACTAL))


def start_flaky():
    """Enqueue a task that fails twice, then succeeds; return it."""
    return atp.enqueue("demo.flaky", {})


def start_hang():
    """Enqueue a task that hangs until its restarts are spent; return it."""
    return atp.enqueue("demo.hang", {})


def start_limited():
    """Enqueue ``LIMITED_TASKS`` tasks of the rate-limited type at once; return them."""
    return atp.enqueue_many("demo.limited", [{"number": number} for number in range(LIMITED_TASKS)])


def start_ticking():
    """Create (or enable again) the schedule that enqueues a tick every few seconds."""
    return atp.schedule(TICK_SCHEDULE, "demo.tick", every=TICK_SECONDS, enabled=True)


def stop_ticking():
    """Delete the tick schedule, if it is there; return whether it was."""
    try:
        atp.unschedule(TICK_SCHEDULE)
    except ScheduleNotFound:
        return False
    return True


def is_ticking():
    """Return whether the tick schedule is there."""
    return Schedule.objects.filter(name=TICK_SCHEDULE).exists()
