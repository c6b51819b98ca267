"""How django-atp shows tasks to people: durations, timelines, inputs, refusals.

Shared by the admin and atp's own pages; the HTML snippets are in ``templatetags.atp``.
"""

import datetime
import json
import zoneinfo
from dataclasses import dataclass

from django.db.models import OuterRef, Subquery
from django.db.models.functions import Right
from django.utils import timezone

from atp.db import ByteLength
from atp.exceptions import NotDelayed, TaskAlreadyExists, TaskNotFound
from atp.models import Inputs, LogRecord
from atp.serialization import TOKEN_END_CHARS, InputFormat, pickled_size
from atp.states import LIVE, Status

#: Larger inputs are described, not shown.
INPUTS_SHOWN_BYTES = 64 * 1024
#: A task's page shows its latest history entries, this many at most.
HISTORY_SHOWN = 500


def format_duration(delta):
    """Return a timedelta as a short human reading: ``850 ms``, ``12.5 s``, ``3 min 4 s``, ``2 h 5 min``."""
    if delta is None:
        return ""
    seconds = delta.total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    return f"{hours // 24} d {hours % 24} h"


@dataclass(frozen=True)
class TimelineRow:
    record: object
    spent: object = None  # how long the task stayed in the state this record entered


def seconds_in_zone(moment, zone=""):
    """Return ``moment`` to the second with its time zone's name, ``2026-11-26 08:00:00
    CET``: in the time zone named ``zone`` (such as a schedule's; empty: UTC), or in the
    current one when ``zone`` is None."""
    if moment is None:
        return ""
    if zone is None:
        local = timezone.localtime(moment)
    else:
        local = moment.astimezone(zoneinfo.ZoneInfo(zone) if zone else datetime.UTC)
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}"


def timeline(records, status=None, now=None):
    """Return the history as ``TimelineRow``s, each state change with the time spent in it.

    The current state of a live task (``status``) counts up to ``now``.
    """
    records = list(records)
    changes = [r for r in records if r.status]
    spent = {}
    for current, following in zip(changes, changes[1:], strict=False):
        spent[current.pk] = following.time - current.time
    if changes and status in LIVE:
        spent[changes[-1].pk] = (now or timezone.now()) - changes[-1].time
    return [TimelineRow(record, spent.get(record.pk)) for record in records]


@dataclass(frozen=True)
class ShownInputs:
    """A task's inputs for display: ``text`` is pretty JSON when ``is_json``, else a note."""

    text: str
    is_json: bool


def describe_inputs(pk):
    """Return a task's inputs for display (a note for pickles and giants), or None."""
    inputs = (Inputs.objects.filter(pk=pk).defer("data")
              .annotate(stored_bytes=ByteLength("data"), end=Right("data", TOKEN_END_CHARS))
              .first())
    if inputs is None:
        return None
    if inputs.input_format == InputFormat.PICKLE:
        # A pickle is stored signed, in base64, which is ASCII: bytes are characters.
        size = pickled_size(inputs.stored_bytes, inputs.end)
        return ShownInputs(f"pickled, {size:,} bytes (only the worker unpickles it)", False)
    if inputs.stored_bytes > INPUTS_SHOWN_BYTES:
        return ShownInputs(f"JSON, {inputs.stored_bytes:,} bytes (too large to show)", False)
    # Small enough: only now is the text itself fetched.
    return ShownInputs(json.dumps(json.loads(inputs.data), indent=2, ensure_ascii=False), True)


#: Why a task in this state refused what was asked of it.
REFUSED_BECAUSE = {
    Status.ACCEPTED: "still queued",
    Status.SCHEDULED: "not started yet",
    Status.RUNNING: "running",
    Status.PAUSED: "paused",
    Status.FINISHED: "already finished",
    Status.FAILED: "already failed",
    Status.CANCELLED: "already cancelled",
}


def refusal_reason(exc):
    """Return a few words saying why a task refused a change."""
    if isinstance(exc, TaskAlreadyExists):
        return "a live task has its identifier"
    if isinstance(exc, TaskNotFound):
        return "deleted meanwhile"
    if isinstance(exc, NotDelayed):
        return "not delayed"
    if exc.current is not None and exc.current == exc.target:
        return f"already {Status(exc.current).label}"
    return REFUSED_BECAUSE.get(exc.current, str(exc))


#: How much of a failure the task lists show: its last line, cut to this many characters.
EXCERPT_CHARS = 160
#: How much of the end of a failure a list reads (the database cuts it): its last line.
FAILURE_TAIL_CHARS = 400


def failure_text(pk):
    """Return the text of task ``pk``'s latest failure, or None if it has none."""
    return (LogRecord.objects.filter(instance_id=pk, status=Status.FAILED).order_by("-id")
            .values_list("message", flat=True).first())


def latest_failure_tail():
    """Return the end of a task's latest failure as a subquery, to annotate a list with
    (``Instance.objects.annotate(failure_tail=...)``): read through the history's
    timeline index, cut by the database, for the rows of the page only."""
    return Subquery(
        LogRecord.objects.filter(instance_id=OuterRef("pk"), status=Status.FAILED)
        .order_by("-id").annotate(tail=Right("message", FAILURE_TAIL_CHARS))
        .values("tail")[:1])


def excerpt(text):
    """Return the gist of a failure: its last non-empty line (a traceback's exception), cut."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return last if len(last) <= EXCERPT_CHARS else f"{last[:EXCERPT_CHARS - 1]}…"
