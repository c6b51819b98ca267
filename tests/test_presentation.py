import datetime
import pickle

import pytest

from atp.exceptions import InvalidTransition, TaskAlreadyExists, TaskNotFound
from atp.models import LogRecord
from atp.presentation import format_duration, refusal_reason, timeline
from atp.states import Status

T0 = datetime.datetime(2026, 11, 21, 10, 0, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    "seconds, text",
    [(0.8504, "850 ms"), (12.46, "12.5 s"), (184, "3 min 4 s"), (7500, "2 h 5 min"),
     (3 * 86400 + 3600, "3 d 1 h")],
)
def test_durations_read_shortly(seconds, text):
    assert format_duration(datetime.timedelta(seconds=seconds)) == text
    assert format_duration(None) == ""


def record(pk, seconds, status):
    return LogRecord(pk=pk, time=T0 + datetime.timedelta(seconds=seconds), status=status)


def test_the_timeline_says_how_long_each_state_lasted():
    records = [record(1, 0, Status.ACCEPTED), record(2, 5, Status.SCHEDULED),
               record(3, 6, Status.RUNNING), record(4, 8, None), record(5, 16, Status.FINISHED)]
    spent = [row.spent for row in timeline(records, Status.FINISHED)]
    seconds = [s.total_seconds() if s else None for s in spent]
    assert seconds == [5, 1, 10, None, None]


def test_the_current_state_of_a_live_task_counts_until_now():
    rows = timeline([record(1, 0, Status.ACCEPTED)], Status.ACCEPTED,
                    now=T0 + datetime.timedelta(seconds=42))
    assert rows[0].spent == datetime.timedelta(seconds=42)


def test_refusals_read_as_reasons():
    assert refusal_reason(InvalidTransition(current=Status.FINISHED, target=Status.ACCEPTED)) == "already finished"
    assert refusal_reason(InvalidTransition(current=Status.PAUSED, target=Status.PAUSED)) == "already paused"
    assert refusal_reason(InvalidTransition(current=Status.ACCEPTED, target=Status.PAUSED)) == "still queued"
    assert refusal_reason(TaskAlreadyExists()) == "a live task has its identifier"
    assert refusal_reason(TaskNotFound()) == "deleted meanwhile"


@pytest.mark.django_db
def test_inputs_are_shown_pretty_and_giants_are_described_without_being_fetched(pickle_enabled):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    import atp
    from atp.presentation import INPUTS_SHOWN_BYTES, describe_inputs

    atp.register_task_type("tests.noop", "tests.handlers.noop")
    small = atp.enqueue("tests.noop", {"city": "Wien"})
    giant = atp.enqueue("tests.noop", {"blob": "x" * INPUTS_SHOWN_BYTES})
    assert describe_inputs(small.pk).text == '{\n  "city": "Wien"\n}'
    with CaptureQueriesContext(connection) as queries:
        shown = describe_inputs(giant.pk)
    assert not shown.is_json and shown.text == f"JSON, {INPUTS_SHOWN_BYTES + 11:,} bytes (too large to show)"
    assert len(queries) == 1 and "x" * 100 not in str(queries.captured_queries)
    assert describe_inputs(10**9) is None
    atp.register_task_type("tests.pickled", "tests.handlers.echo", input_format="pickle")
    pickled = atp.enqueue("tests.pickled", b"x" * 1000)
    size = len(pickle.dumps(b"x" * 1000, protocol=pickle.HIGHEST_PROTOCOL))
    assert describe_inputs(pickled.pk).text == f"pickled, {size:,} bytes (only the worker unpickles it)"
