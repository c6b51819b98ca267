"""Expiry (``enqueue(..., expires=...)``), on each engine: no attempt starts after it, and
a task still waiting then ends CANCELLED saying it expired."""

import datetime
import math
import time

import pytest
from django.db import connection
from django.utils import timezone

import atp
from atp import engine
from atp.daemon.execution import has_expired
from atp.db import database_now
from atp.engine.base import database
from atp.engine.outcomes import Outcome
from atp.exceptions import AttemptSuperseded, InvalidParameter, InvalidTransition
from atp.invariants import check_queue
from atp.models import Instance, LogRecord, Task
from atp.states import Status
from tests.factories import claim_exactly

S = datetime.timedelta(seconds=1)


def expire_now(instance):
    """Let its expiry pass: move it to just before now, as the claim sees it."""
    now = database_now(database())
    Task.objects.filter(pk=instance.pk).update(expires=now - S / 10)
    Instance.objects.filter(pk=instance.pk).update(expires=now - S / 10)


def last_message(instance):
    return LogRecord.objects.filter(instance=instance).last().message


def test_a_task_keeps_its_expiry_on_the_task_and_its_queue_row(noop_type):
    before = timezone.now()
    by_seconds = atp.enqueue("tests.noop", expires=60)
    by_delta = atp.enqueue("tests.noop", expires=datetime.timedelta(minutes=2), countdown=30)
    moment = timezone.now() + datetime.timedelta(hours=1)
    by_moment = atp.enqueue("tests.noop", expires=moment)
    many = atp.enqueue_many("tests.noop", [1, 2], expires=90)
    for task, seconds in ((by_seconds, 60), (by_delta, 120), *((t, 90) for t in many)):
        row = Task.objects.get(pk=task.pk)
        assert Instance.objects.get(pk=task.pk).expires == row.expires
        assert abs(row.expires - row.enqueued - seconds * S) < S / 100
        assert row.expires > before
    assert Task.objects.get(pk=by_moment.pk).expires == moment
    assert Task.objects.get(pk=atp.enqueue("tests.noop").pk).expires is None


@pytest.mark.parametrize("options, message", [
    ({"expires": 0}, "expires must be an aware datetime, or a number of seconds"),
    ({"expires": -5}, "expires must be"),
    ({"expires": math.nan}, "expires must be"),
    ({"expires": math.inf}, "expires must be"),
    ({"expires": True}, "expires must be"),
    ({"expires": "60"}, "expires must be"),
    ({"expires": datetime.datetime(2030, 1, 1)}, "expires must be timezone-aware"),
    ({"expires": 10, "countdown": 10}, "must come after the task's countdown"),
    ({"expires": datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC),
      "eta": datetime.datetime(2031, 1, 1, tzinfo=datetime.UTC)}, "must come after the task's eta"),
    ({"expires": datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)}, "would expire"),
])
def test_an_expiry_that_cannot_come_after_the_task_is_due_is_refused(noop_type, options,
                                                                      message):
    count = Instance.objects.count()
    with pytest.raises(InvalidParameter, match=message):
        atp.enqueue("tests.noop", **options)
    with pytest.raises(InvalidParameter, match=message):
        atp.enqueue_many("tests.noop", [1, 2], **options)
    assert Instance.objects.count() == count, "a refused enqueue wrote something"


def test_enqueue_on_commit_checks_the_expiry_at_the_call(noop_type):
    with pytest.raises(InvalidParameter, match="must come after the task's countdown"):
        atp.enqueue_on_commit("tests.noop", countdown=5, expires=5)
    assert not Instance.objects.exists()


def test_an_expired_task_is_never_claimed(noop_type, daemon):
    expiring = atp.enqueue("tests.noop", expires=60, priority=1)
    other = atp.enqueue("tests.noop")
    expire_now(expiring)
    for claim in (lambda: atp.dequeue(daemon, limit=5),
                  lambda: engine.claim_for_daemon(daemon, 5, [noop_type.pk], start=1)):
        claimed = claim()
        assert [task.pk for task in claimed] in ([other.pk], [])
    assert Instance.objects.get(pk=expiring.pk).status == Status.ACCEPTED


def test_a_task_claimed_before_it_expires_runs(noop_type, daemon):
    task = atp.enqueue("tests.noop", expires=60)
    claimed = claim_exactly(task, daemon)
    expire_now(task)
    assert engine.expire_waiting() == 0
    engine.start(claimed, attempt=claimed.attempt, daemon=daemon)
    engine.finish(task.pk, attempt=claimed.attempt, daemon=daemon)
    assert Instance.objects.get(pk=task.pk).status == Status.FINISHED


def test_the_sweep_cancels_the_expired_waiting_tasks_and_only_them(noop_type, daemon):
    expiring = [atp.enqueue("tests.noop", expires=60) for _ in range(3)]
    later = atp.enqueue("tests.noop", expires=60)
    never = atp.enqueue("tests.noop")
    for task in expiring:
        expire_now(task)
    assert engine.expire_waiting() == 3
    assert engine.expire_waiting() == 0
    for task in expiring:
        instance = Instance.objects.get(pk=task.pk)
        assert (instance.status, instance.attempt) == (Status.CANCELLED, 0)
        assert instance.finished is not None
        assert last_message(task).startswith("expired: not started by ")
        assert instance.expires.isoformat(timespec="milliseconds") in last_message(task)
    for task in (later, never):
        assert Instance.objects.get(pk=task.pk).status == Status.ACCEPTED
    assert [str(v) for v in check_queue()] == []


def test_a_retried_task_waiting_past_its_expiry_is_cancelled_too(db, daemon):
    atp.register_task_type("tests.retried", "tests.handlers.fail", retry_limit=3, min_backoff=30)
    task = atp.enqueue("tests.retried", expires=10)
    claimed = claim_exactly(task, daemon)
    engine.start(claimed, attempt=claimed.attempt, daemon=daemon)
    engine.fail_or_retry(task.pk, "boom", attempt=claimed.attempt, daemon=daemon)
    expire_now(task)
    assert engine.expire_waiting() == 1
    assert Instance.objects.get(pk=task.pk).status == Status.CANCELLED


def test_a_pull_consumer_leases_no_expired_task(db):
    atp.register_pull_type("tests.pulled")
    task = atp.enqueue("tests.pulled", expires=60)
    expire_now(task)
    assert atp.lease_tasks("tests.pulled", 10, 60) == []


def test_a_prefetched_attempt_reaching_its_worker_after_the_expiry_is_cancelled(noop_type,
                                                                                daemon):
    from atp.daemon.recording import record

    task = atp.enqueue("tests.noop", expires=30)
    claimed = claim_exactly(task, daemon)  # SCHEDULED: prefetched
    left = (claimed.expires - claimed.updated).total_seconds()
    assert 29 < left <= 30
    assert not has_expired(claimed, left - 0.01)
    assert has_expired(claimed, left)
    assert record(Outcome.expired(task.pk, claimed.attempt), daemon)
    instance = Instance.objects.get(pk=task.pk)
    assert instance.status == Status.CANCELLED and instance.started is None
    assert last_message(task).startswith("expired: not started by ")
    assert Status.RUNNING not in LogRecord.objects.filter(instance=task).values_list(
        "status", flat=True)
    assert not Task.objects.filter(pk=task.pk).exists()


def test_a_started_or_unexpiring_task_never_expires_in_its_worker(noop_type, daemon):
    atp.enqueue("tests.noop", expires=30)
    [started] = engine.claim_for_daemon(daemon, 1, [noop_type.pk], start=1)
    assert started.status == Status.RUNNING and not has_expired(started, 3600)
    unexpiring = claim_exactly(atp.enqueue("tests.noop"), daemon)
    assert not has_expired(unexpiring, 3600)


def test_an_expiry_of_a_superseded_attempt_changes_nothing(noop_type, daemon):
    task = atp.enqueue("tests.noop", expires=30)
    claimed = claim_exactly(task, daemon)
    atp.reenqueue(task)
    with pytest.raises((AttemptSuperseded, InvalidTransition)):
        engine.expire_attempt(task.pk, attempt=claimed.attempt, daemon=daemon)
    assert Instance.objects.get(pk=task.pk).status == Status.ACCEPTED


def test_a_worker_answers_a_prefetched_expired_task_without_running_it(noop_type, daemon):
    import multiprocessing

    from atp.daemon import handoff, worker
    from atp.daemon.lease import clock

    task = atp.enqueue("tests.noop", expires=30)
    claimed = claim_exactly(task, daemon)
    [(received, *_)] = handoff.unpack(handoff.pack([(
        Instance.objects.select_related("type").get(pk=claimed.pk), claimed.attempt,
        "tests.handlers.noop", "h")]))
    dropping, deadline = multiprocessing.Value("b", 0), multiprocessing.Value("d", clock() + 60)
    answer = worker._run(received, claimed.attempt, "tests.handlers.noop", "h", dropping,
                         deadline, clock() - 31)
    assert answer[0] == "done"
    outcome = handoff.outcome_of(answer[3])
    assert (outcome.status, outcome.pk) == (Status.CANCELLED, task.pk)
    assert Instance.objects.get(pk=task.pk).status == Status.SCHEDULED, "it ran"


@pytest.mark.django_db(transaction=True)
def test_an_expiry_racing_a_claim_leaves_the_claimed_task_to_run(noop_type):
    """The claim takes the task just before it expires and holds it uncommitted while
    the sweep, after the expiry, finds it waiting: the sweep waits for the claim and
    then leaves the task, claimed, alone."""
    from tests.interleave import interleave

    claimer = engine.register_daemon()
    task = atp.enqueue("tests.noop", expires=1.5)
    expires = Task.objects.get(pk=task.pk).expires

    def sweep_once_expired():
        while database_now(database()) <= expires:
            time.sleep(0.05)
        return engine.expire_waiting()

    first, second = interleave(lambda: engine.dequeue(claimer),
                               sweep_once_expired, pause_after=r"atp_logrecord")
    assert [claimed.pk for claimed in first.get()] == [task.pk], "claimed after it expired"
    assert second.get() == 0
    if connection.vendor != "sqlite":  # one writer at a time there: it could only wait
        assert second.waited, "the sweep did not meet the claim's lock: no race was run"
    assert Instance.objects.get(pk=task.pk).status == Status.SCHEDULED
    assert [str(v) for v in check_queue()] == []


def test_the_sweep_is_not_stalled_by_held_tasks(noop_type, daemon, monkeypatch):
    """Held (paused, off their daemon) tasks the sweep leaves alone must not fill its
    batch for good (a review found it)."""
    from atp.engine import maintenance

    monkeypatch.setattr(maintenance, "EXPIRE_BATCH_SIZE", 2)
    held = []
    for _ in range(2):
        task = atp.enqueue("tests.noop", expires=60, priority=1)
        claimed = claim_exactly(task, daemon)
        engine.start(claimed, attempt=claimed.attempt, daemon=daemon)
        atp.pause(task)
        engine.hand_back(task.pk, attempt=claimed.attempt, daemon=daemon)  # held
        held.append(task)
    waiting = atp.enqueue("tests.noop", expires=60)
    for task in (*held, waiting):
        expire_now(task)
    assert maintenance.expire_waiting(limit=2) == 1
    assert Instance.objects.get(pk=waiting.pk).status == Status.CANCELLED
    assert {Instance.objects.get(pk=task.pk).status for task in held} == {Status.PAUSED}


def test_an_operators_re_enqueue_of_an_expired_task_runs_it(noop_type, daemon):
    task = atp.enqueue("tests.noop", expires=60)
    expire_now(task)
    assert engine.expire_waiting() == 1
    atp.reenqueue(task)
    assert (Instance.objects.get(pk=task.pk).expires, Task.objects.get(pk=task.pk).expires) == (
        None, None)
    assert [claimed.pk for claimed in atp.dequeue(daemon)] == [task.pk]


def test_a_prefetched_task_started_by_its_supervisor_is_still_cancelled_as_expired(noop_type,
                                                                                     daemon):
    """The supervisor wrote its start (the head of the worker's queue) before the worker
    said it expired: the expiry is written all the same (a review found it refused)."""
    task = atp.enqueue("tests.noop", expires=30)
    claimed = claim_exactly(task, daemon)
    engine.start(claimed, attempt=claimed.attempt, daemon=daemon)
    engine.expire_attempt(task.pk, attempt=claimed.attempt, daemon=daemon)
    assert Instance.objects.get(pk=task.pk).status == Status.CANCELLED
    assert not Task.objects.filter(pk=task.pk).exists()


def test_a_prefetched_tasks_time_left_counts_from_its_claim_not_from_its_worker(noop_type,
                                                                               daemon):
    """A task queued behind a long one reaches its worker late: the worker counts from
    the claim the supervisor stamped (a review found it counted from its own receipt)."""
    import multiprocessing

    from atp.daemon import handoff, worker
    from atp.daemon.lease import clock

    task = atp.enqueue("tests.noop", expires=30)
    claimed = claim_exactly(task, daemon)
    loaded = Instance.objects.select_related("type").get(pk=claimed.pk)
    loaded.claimed_clock = clock() - 31  # claimed 31 s ago, behind a long task
    [(received, *_)] = handoff.unpack(handoff.pack([(loaded, claimed.attempt,
                                                      "tests.handlers.noop", "h")]))
    dropping, deadline = multiprocessing.Value("b", 0), multiprocessing.Value("d", clock() + 60)
    answer = worker._run(received, claimed.attempt, "tests.handlers.noop", "h", dropping,
                         deadline, clock())  # it came to the worker just now
    assert handoff.outcome_of(answer[3]).status == Status.CANCELLED
