import contextlib
import datetime
import time

import pytest
from django.db import connection
from django.db.models import F

import atp
from atp import engine
from atp.engine.lifecycle import settle_each
from atp.engine.outcomes import Outcome
from atp.engine.transitions import move
from atp.exceptions import AttemptSuperseded, InvalidTransition
from atp.models import Instance, LogRecord, Response, Task
from atp.states import Status
from tests.factories import TaskFactory, claim_exactly, snapshot

pytestmark = pytest.mark.django_db


def test_the_core_refuses_an_edge_outside_the_table(noop_type):
    instance = TaskFactory(type=noop_type)
    with pytest.raises(ValueError, match="not in atp.states.TRANSITIONS"):
        move(instance.pk, Status.RUNNING, sources={Status.ACCEPTED})


def test_a_run_moves_through_the_rfc_states_and_ends_off_the_queue(noop_type, daemon):
    queued = atp.enqueue("tests.noop")
    claimed = claim_exactly(queued, daemon)
    engine.start(claimed.pk, attempt=1, daemon=daemon)
    running = Instance.objects.get(pk=queued.pk)
    assert running.status == Status.RUNNING and running.started is not None
    lease = Task.objects.get(pk=queued.pk)
    # Both come from the database clock, one statement apart.
    skew = lease.deadline - running.started - noop_type.timeout
    assert abs(skew) < datetime.timedelta(seconds=1)
    engine.finish(claimed.pk, attempt=1, daemon=daemon)
    done = Instance.objects.get(pk=queued.pk)
    assert done.status == Status.FINISHED and done.finished >= done.started
    assert not Task.objects.filter(pk=queued.pk).exists()


@contextlib.contextmanager
def clock_moving_on_after_each_update():
    """Let the database clock move on after each UPDATE, as it does between a verb's
    statements on a busy server: a change dated by two readings of it shows two times."""

    def sleep_after_updates(execute, sql, params, many, context):
        try:
            return execute(sql, params, many, context)
        finally:
            if sql.lstrip().upper().startswith("UPDATE"):
                time.sleep(0.003)  # past SQLite's millisecond

    with connection.execute_wrapper(sleep_after_updates):
        yield


def entry_time(instance, status):
    return LogRecord.objects.get(instance_id=instance.pk, status=status).time


def test_a_change_and_its_history_entry_bear_one_time(noop_type, daemon):
    """The task's ``started`` and ``finished`` are the times of its RUNNING and FINISHED
    entries, to the microsecond, however far apart the verb's statements run."""
    queued = atp.enqueue("tests.noop")
    claim_exactly(queued, daemon)
    with clock_moving_on_after_each_update():
        engine.start(queued.pk, attempt=1, daemon=daemon)
        engine.finish(queued.pk)  # an operator's: the portable verb on every database
    done = Instance.objects.get(pk=queued.pk)
    assert entry_time(done, Status.RUNNING) == done.started
    assert entry_time(done, Status.FINISHED) == done.finished


def test_a_failure_past_its_retries_and_its_history_entry_bear_one_time(noop_type, daemon):
    queued = atp.enqueue("tests.noop")
    claim_exactly(queued, daemon)
    engine.start(queued.pk, attempt=1, daemon=daemon)
    with clock_moving_on_after_each_update():
        engine.fail_or_retry(queued.pk, "Traceback: boom", attempt=1, daemon=daemon)
    failed = Instance.objects.get(pk=queued.pk)
    assert failed.status == Status.FAILED
    assert entry_time(failed, Status.FAILED) == failed.finished


def test_a_prefetched_start_and_its_history_entry_bear_one_time(noop_type, daemon):
    """A start written after it began (``settle``'s portable form) is dated once, for
    the task and for its history."""
    queued = atp.enqueue("tests.noop")
    claim_exactly(queued, daemon)
    # Claimed long ago: the start is dated by the clock, not by the claim.
    Task.objects.filter(pk=queued.pk).update(claimed=F("claimed") - datetime.timedelta(hours=1))
    with clock_moving_on_after_each_update():
        assert settle_each(daemon, [Outcome.started(queued.pk, 1, 0.5)]) == {queued.pk}
    running = Instance.objects.get(pk=queued.pk)
    assert running.status == Status.RUNNING
    assert entry_time(running, Status.RUNNING) == running.started


#: Every write a worker makes for its attempt, as the worker of attempt 1 would make it late.
LATE_WRITES = {
    "finish": lambda pk, d: engine.finish(pk, attempt=1, daemon=d, response="late"),
    "fail": lambda pk, d: engine.fail(pk, "late failure", attempt=1, daemon=d),
    "start": lambda pk, d: engine.start(pk, attempt=1, daemon=d),
    "start and load": lambda pk, d: engine.start_and_load(pk, attempt=1, daemon=d),
    "hand back": lambda pk, d: engine.hand_back(pk, attempt=1, daemon=d),
    "restart": lambda pk, d: engine.restart(pk, "late", attempt=1, daemon=d),
    "progress": lambda pk, d: engine.set_progress(pk, 5, 10, attempt=1),
    "response": lambda pk, d: engine.set_response(pk, "late", attempt=1),
    "log": lambda pk, d: engine.log(pk, "late", attempt=1, daemon=d),
}


@pytest.mark.parametrize("newer", [Status.SCHEDULED, Status.RUNNING, Status.PAUSED])
@pytest.mark.parametrize("write", LATE_WRITES)
def test_writes_from_a_superseded_attempt_are_ignored(noop_type, daemon, newer, write):
    """Fencing: once an attempt is given up, its late writes change nothing, whatever
    the newer attempt is doing (running or paused: states the old one could write in)."""
    instance = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)
    engine.restart(instance, "daemon lost", attempt=1)
    other = engine.register_daemon()
    claim_exactly(instance, other)
    if newer != Status.SCHEDULED:
        engine.start(instance, attempt=2, daemon=other)
    if newer == Status.PAUSED:
        atp.pause(instance)
    before = snapshot(instance)
    with pytest.raises(AttemptSuperseded, match="attempt 1 was superseded by attempt 2"):
        LATE_WRITES[write](instance.pk, daemon)
    assert snapshot(instance) == before
    assert not Response.objects.filter(instance=instance).exists()


def test_restarts_are_counted_until_the_limit_then_the_task_fails(db, daemon):
    atp.register_task_type("tests.fragile", "tests.handlers.noop", max_restarts=2)
    instance = atp.enqueue("tests.fragile")
    for attempt in (1, 2):
        claim_exactly(instance, daemon)
        engine.start(instance, attempt=attempt)
        engine.restart(instance, "time-out", attempt=attempt)
        assert Instance.objects.get(pk=instance.pk).status == Status.ACCEPTED
    claim_exactly(instance, daemon)
    engine.restart(instance, "time-out", attempt=3)
    failed = Instance.objects.get(pk=instance.pk)
    assert (failed.status, failed.restarts, failed.attempt) == (Status.FAILED, 2, 3)
    messages = list(LogRecord.objects.filter(instance=instance, status__in=[Status.ACCEPTED, Status.FAILED]).values_list("message", flat=True))
    assert messages == [
        "enqueued", "time-out; restart 1 of 2", "time-out; restart 2 of 2",
        "time-out; restart limit reached (2 restarts)",
    ]
    assert not Task.objects.filter(pk=instance.pk).exists()


def test_handing_back_spends_no_restart_and_keeps_the_queue_position(noop_type, daemon):
    first = atp.enqueue("tests.noop")
    second = atp.enqueue("tests.noop")
    claim_exactly(first, daemon)
    engine.hand_back(first, "shutting down", attempt=1)
    back = Instance.objects.get(pk=first.pk)
    assert (back.status, back.restarts, back.attempt) == (Status.ACCEPTED, 0, 1)
    assert Task.objects.get(pk=first.pk).daemon is None
    assert [task.pk for task in atp.dequeue(daemon, limit=2)] == [first.pk, second.pk]


def test_a_task_paused_as_its_handler_returned_can_still_finish(noop_type):
    instance = TaskFactory(type=noop_type, status=Status.PAUSED)
    engine.finish(instance, attempt=instance.attempt)
    assert Instance.objects.get(pk=instance.pk).status == Status.FINISHED




def test_release_lets_go_of_a_task_an_operator_took_from_its_daemon(noop_type, daemon):
    requeued = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)
    cancelled = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)
    atp.reenqueue(requeued)
    atp.cancel(cancelled)
    other = engine.register_daemon()
    assert engine.release(requeued, daemon=other) is False  # not its lease
    assert engine.release(requeued, daemon=daemon) is True
    assert engine.release(cancelled, daemon=daemon) is True
    assert Task.objects.get(pk=requeued.pk).daemon is None
    assert not Task.objects.filter(pk=cancelled.pk).exists()
    assert [t.pk for t in atp.dequeue(other, limit=5)] == [requeued.pk]


def test_release_refuses_a_task_still_in_flight(noop_type, daemon):
    running = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)
    with pytest.raises(InvalidTransition, match="hand it back or restart it instead"):
        engine.release(running, daemon=daemon)


@pytest.mark.parametrize("lose", ["hand back", "restart", "retire", "reap"])
def test_a_paused_task_whose_attempt_is_lost_stays_paused_until_resumed(noop_type, daemon, lose):
    paused = TaskFactory(type=noop_type, status=Status.PAUSED, daemon=daemon)
    if lose == "hand back":
        engine.hand_back(paused, "daemon stopped", attempt=1, daemon=daemon)
    elif lose == "restart":
        engine.restart(paused, "worker died", attempt=1, daemon=daemon)
    elif lose == "retire":
        assert engine.retire_daemon(daemon) == 1
    else:
        assert engine.reap_daemon(daemon, "silent") == 1
    held = Instance.objects.get(pk=paused.pk)
    assert held.status == Status.PAUSED
    assert held.restarts == (1 if lose in ("restart", "reap") else 0)
    row = Task.objects.get(pk=paused.pk)
    assert row.daemon is None and row.paused_since is not None
    last = LogRecord.objects.filter(instance=paused).last()
    assert last.status is None and "stays paused: resume it to run it again" in last.message
    other = engine.register_daemon()
    assert atp.dequeue(other) == [], "a held task must not run before it is resumed"
    # A late write of the lost attempt is refused, and it is not held twice.
    before = snapshot(paused)
    for late in (lambda: engine.finish(paused, attempt=1, daemon=daemon),
                 lambda: engine.fail(paused, "late", attempt=1, daemon=daemon),
                 lambda: engine.restart(paused, "again", attempt=1, daemon=daemon),
                 lambda: engine.hand_back(paused, "again", attempt=1, daemon=daemon)):
        with pytest.raises(InvalidTransition):
            late()
        assert snapshot(paused) == before
    atp.resume(paused)
    assert Instance.objects.get(pk=paused.pk).status == Status.ACCEPTED
    assert "attempt 1 was lost while paused" in LogRecord.objects.filter(instance=paused).last().message
    [again] = atp.dequeue(other)
    assert (again.pk, again.attempt) == (paused.pk, 2)


def test_a_held_task_whose_restarts_are_spent_is_not_failed_by_a_late_restart(db, daemon):
    atp.register_task_type("tests.once", "tests.handlers.noop", max_restarts=1)
    paused = TaskFactory(type=atp.get_type("tests.once"), status=Status.PAUSED, daemon=daemon)
    engine.restart(paused, "worker died", attempt=1, daemon=daemon)  # held, 1 of 1 spent
    before = snapshot(paused)
    with pytest.raises(InvalidTransition, match="no daemon holds it"):
        engine.restart(paused, "worker died", attempt=1, daemon=daemon)
    assert snapshot(paused) == before


def test_a_held_task_of_a_limited_type_is_not_claimed_either(db, daemon):
    atp.register_task_type("tests.limited", "tests.handlers.noop", max_concurrency=5)
    paused = TaskFactory(type=atp.get_type("tests.limited"), status=Status.PAUSED, daemon=daemon)
    engine.hand_back(paused, "daemon stopped", attempt=1, daemon=daemon)
    before = snapshot(paused)
    assert atp.dequeue(engine.register_daemon(), limit=5) == []
    assert snapshot(paused) == before


@pytest.mark.parametrize("take_away", [
    lambda t: atp.cancel(t), lambda t: atp.reenqueue(t),
    lambda t: atp.set_status(t, Status.FAILED), lambda t: atp.set_status(t, Status.FINISHED),
], ids=["cancel", "reenqueue", "operator fail", "operator finish"])
@pytest.mark.parametrize("write", ["finish", "fail", "progress", "response", "log"])
def test_a_running_attempt_taken_away_by_an_operator_writes_nothing_more(
        noop_type, daemon, take_away, write):
    """The same attempt, still running until its daemon stops it: its writes are refused."""
    instance = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)
    take_away(instance)
    before = snapshot(instance)
    with pytest.raises(InvalidTransition):
        LATE_WRITES[write](instance.pk, daemon)
    assert snapshot(instance) == before
    assert not Response.objects.filter(instance=instance).exists()


@pytest.mark.parametrize("verb, status", [
    (atp.cancel, Status.CANCELLED), (atp.reenqueue, Status.ACCEPTED),
    (lambda t: atp.set_status(t, Status.FAILED), Status.FAILED),
])
def test_a_held_task_can_be_cancelled_reenqueued_or_failed(noop_type, daemon, verb, status):
    paused = TaskFactory(type=noop_type, status=Status.PAUSED, daemon=daemon)
    engine.hand_back(paused, "daemon stopped", attempt=1, daemon=daemon)
    verb(paused)
    assert Instance.objects.get(pk=paused.pk).status == status
    if status == Status.ACCEPTED:
        assert [t.pk for t in atp.dequeue(daemon)] == [paused.pk]
    else:
        assert not Task.objects.filter(pk=paused.pk).exists()
