"""A handler's snooze (``atp.Snooze``, ``lifecycle.snooze``), on each engine: back to the
queue, due later, spending no retry and no restart, bounded by the type's ``max_snoozes``.

Time is the queue row's ``not_before``: a test "lets time pass" by moving it.
"""

import datetime
import math

import pytest

import atp
from atp import engine
from atp.exceptions import AttemptSuperseded, InvalidParameter, InvalidTransition
from atp.models import Instance, LogRecord, Task
from atp.states import Status
from tests.factories import claim_exactly, come_due, running

S = datetime.timedelta(seconds=1)


def last_message(instance):
    return LogRecord.objects.filter(instance=instance).last().message


@pytest.fixture
def snoozing_type(db):
    return atp.register_task_type("tests.snoozing", "tests.handlers.snooze", retry_limit=3,
                                  max_restarts=1, max_snoozes=2)


def test_a_snooze_waits_then_runs_again_spending_no_retry_and_no_restart(snoozing_type, daemon):
    task = atp.enqueue("tests.snoozing")
    for number in (1, 2):
        current = running(task, daemon)
        engine.snooze(task.pk, 7.5, "not ready", attempt=current.attempt, daemon=daemon)
        after = Instance.objects.get(pk=task.pk)
        row = Task.objects.get(pk=task.pk)
        assert (after.status, after.snoozes, after.retries, after.restarts, after.started,
                row.daemon_id) == (Status.ACCEPTED, number, 0, 0, None, None)
        last = LogRecord.objects.filter(instance=task).last()
        assert abs(row.not_before - last.time - 7.5 * S) < S / 10
        assert (last.status, last.attempt) == (Status.ACCEPTED, number)
        assert last.message.startswith("not ready\n")
        assert f"snoozed (snooze {number} of at most 2): due at" in last.message
        assert last.message.endswith("in 7.5 s")
        assert atp.dequeue(daemon) == [], "claimed before its snooze was over"
        come_due(task)
    current = running(task, daemon)
    assert current.attempt == 3
    engine.finish(task.pk, attempt=current.attempt, daemon=daemon)
    assert Instance.objects.get(pk=task.pk).status == Status.FINISHED


def test_the_snooze_after_max_snoozes_fails_the_task(snoozing_type, daemon):
    task = atp.enqueue("tests.snoozing")
    for _ in range(2):
        current = running(task, daemon)
        engine.snooze(task.pk, 0, "", attempt=current.attempt, daemon=daemon)
        come_due(task)
    current = running(task, daemon)
    engine.snooze(task.pk, 0, "still not ready", attempt=current.attempt, daemon=daemon)
    after = Instance.objects.get(pk=task.pk)
    assert (after.status, after.snoozes, after.retries) == (Status.FAILED, 2, 0)
    assert after.finished is not None
    assert last_message(task) == ("still not ready\nsnoozed again after 2 snoozes, its "
                                  "type's max_snoozes: failed instead")
    assert not Task.objects.filter(pk=task.pk).exists()
    atp.reenqueue(task)  # an operator's re-enqueue gives it its snoozes again
    assert Instance.objects.get(pk=task.pk).snoozes == 0


def test_without_max_snoozes_a_task_may_snooze_as_often_as_it_asks(db, daemon):
    atp.register_task_type("tests.patient", "tests.handlers.snooze")
    task = atp.enqueue("tests.patient")
    for _ in range(5):
        current = running(task, daemon)
        engine.snooze(task.pk, 0, "", attempt=current.attempt, daemon=daemon)
        come_due(task)
    assert Instance.objects.get(pk=task.pk).snoozes == 5
    assert "snoozed (snooze 5): due at" in last_message(task)


def test_a_snooze_of_a_superseded_attempt_changes_nothing(snoozing_type, daemon):
    task = atp.enqueue("tests.snoozing")
    current = running(task, daemon)
    atp.reenqueue(task)  # an operator took it back: the attempt is superseded
    with pytest.raises((AttemptSuperseded, InvalidTransition)):
        engine.snooze(task.pk, 5, "late", attempt=current.attempt, daemon=daemon)
    assert Instance.objects.get(pk=task.pk).snoozes == 0
    assert "late" not in last_message(task)


def test_a_paused_task_that_snoozed_stays_paused_until_resumed(snoozing_type, daemon):
    task = atp.enqueue("tests.snoozing")
    current = running(task, daemon)
    atp.pause(task)
    engine.snooze(task.pk, 5, "", attempt=current.attempt, daemon=daemon)
    after = Instance.objects.get(pk=task.pk)
    assert (after.status, after.snoozes) == (Status.PAUSED, 1)
    assert "snoozed (snooze 1 of at most 2): it runs again once resumed" in last_message(task)
    atp.resume(task)
    assert Instance.objects.get(pk=task.pk).status == Status.ACCEPTED


def test_a_prefetched_attempt_that_snoozed_gets_its_start_then_its_snooze(snoozing_type,
                                                                           daemon):
    from atp.daemon.recording import record
    from atp.engine.outcomes import Outcome

    task = atp.enqueue("tests.snoozing")
    claimed = claim_exactly(task, daemon)  # SCHEDULED: its start is not written
    snoozed = Outcome.snoozed(task.pk, claimed.attempt, 3, "wait")
    assert snoozed.alone and snoozed.snoozes
    assert record(snoozed.since_start(0.5), daemon)
    history = list(LogRecord.objects.filter(instance=task).values_list("status", flat=True))
    assert history == [Status.ACCEPTED, Status.SCHEDULED, Status.RUNNING, Status.ACCEPTED]
    assert Instance.objects.get(pk=task.pk).snoozes == 1


def test_a_hand_back_is_no_snooze(snoozing_type, daemon):
    from atp.engine.outcomes import Outcome

    handed_back = Outcome.handed_back(1, 1, "not ours")
    assert not handed_back.snoozes
    assert handed_back.since_start(0.5) is handed_back, "a hand-back never ran: no start"
    with pytest.raises(ValueError, match="an attempt whose start is not written"):
        Outcome(1, 1, Status.ACCEPTED, started_ago=0.5)


@pytest.mark.parametrize("seconds", [-1, math.nan, math.inf, True, "5", 10**9 + 1, None])
def test_a_snooze_of_no_sensible_length_is_refused(seconds):
    with pytest.raises(InvalidParameter, match="a snooze lasts a number of seconds"):
        atp.Snooze(seconds)


def test_a_snooze_may_last_a_timedelta():
    assert atp.Snooze(datetime.timedelta(minutes=2), "later").seconds == 120.0
    assert atp.Snooze(0).seconds == 0.0


@pytest.mark.parametrize("value", [-1, 2**31, 1.5, "3", True])
def test_a_bad_max_snoozes_is_refused(db, value):
    with pytest.raises(InvalidParameter, match="max_snoozes must be an integer from 0"):
        atp.register_task_type("tests.bad", "tests.handlers.snooze", max_snoozes=value)
