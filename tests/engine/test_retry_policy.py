"""A type's retry policy for handler failures (``fail_or_retry``), on each engine.

Time is the queue row's ``not_before``: a test "lets time pass" by moving it, and the
age of a task by moving its first start in its history; nothing sleeps through a wait.
"""

import datetime

import pytest

import atp
from atp import engine
from atp.models import Instance, LogRecord, Task
from atp.states import Status
from tests.factories import claim_exactly, come_due, running

S = datetime.timedelta(seconds=1)


@pytest.fixture
def retried_type(db):
    return atp.register_task_type("tests.retried", "tests.handlers.fail", retry_limit=2,
                                  min_backoff=10, max_backoff=300, max_doublings=3)


def test_a_failure_is_retried_after_the_backoff_until_the_limit(retried_type, daemon):
    task = atp.enqueue("tests.retried")
    for number, wait in ((1, 10), (2, 20)):
        current = running(task, daemon)
        engine.fail_or_retry(task.pk, f"Traceback: failure {number}", attempt=current.attempt,
                             daemon=daemon)
        after = Instance.objects.get(pk=task.pk)
        row = Task.objects.get(pk=task.pk)
        assert (after.status, after.retries, row.daemon_id) == (Status.ACCEPTED, number, None)
        waited = row.not_before - LogRecord.objects.filter(instance=task).last().time
        assert abs(waited - wait * S) < S / 10
        last = LogRecord.objects.filter(instance=task).last().message
        assert f"Traceback: failure {number}" in last
        assert f"retry {number} (retry_limit 2) due at" in last and f"in {wait:g} s" in last
        assert atp.dequeue(daemon) == [], "claimed before its retry was due"
        come_due(task)
    current = running(task, daemon)
    engine.fail_or_retry(task.pk, "Traceback: failure 3", attempt=current.attempt, daemon=daemon)
    after = Instance.objects.get(pk=task.pk)
    assert (after.status, after.retries, after.restarts) == (Status.FAILED, 2, 0)
    assert "not retried: retry_limit 2 reached" in LogRecord.objects.filter(
        instance=task).last().message
    assert not Task.objects.filter(pk=task.pk).exists()


def test_a_countdown_the_handler_asked_for_replaces_the_backoff(retried_type, daemon):
    task = atp.enqueue("tests.retried")
    current = running(task, daemon)
    engine.fail_or_retry(task.pk, "asked", attempt=current.attempt, daemon=daemon, countdown=2.5)
    assert "in 2.5 s" in LogRecord.objects.filter(instance=task).last().message


def test_a_type_without_a_policy_fails_at_once_even_when_asked_to_retry(noop_type, daemon):
    task = atp.enqueue("tests.noop")
    current = running(task, daemon)
    engine.fail_or_retry(task.pk, "asked", attempt=current.attempt, daemon=daemon, countdown=1)
    assert Instance.objects.get(pk=task.pk).status == Status.FAILED
    assert "its type allows no retry" in LogRecord.objects.filter(instance=task).last().message


def test_an_age_limit_alone_retries_until_the_task_first_ran_that_long_ago(db, daemon):
    atp.register_task_type("tests.aged", "tests.handlers.fail", age_limit=60, min_backoff=1)
    task = atp.enqueue("tests.aged")
    current = running(task, daemon)
    engine.fail_or_retry(task.pk, "young", attempt=current.attempt, daemon=daemon)
    assert Instance.objects.get(pk=task.pk).status == Status.ACCEPTED
    come_due(task)
    current = running(task, daemon)
    first_start = LogRecord.objects.filter(instance=task, status=Status.RUNNING).first()
    LogRecord.objects.filter(pk=first_start.pk).update(time=first_start.time - 61 * S)
    engine.fail_or_retry(task.pk, "old", attempt=current.attempt, daemon=daemon)
    assert Instance.objects.get(pk=task.pk).status == Status.FAILED
    assert "not retried: age_limit 60 s reached" in LogRecord.objects.filter(
        instance=task).last().message


def test_a_failure_of_a_superseded_attempt_changes_nothing(retried_type, daemon):
    from atp.exceptions import AttemptSuperseded, InvalidTransition

    task = atp.enqueue("tests.retried")
    current = running(task, daemon)
    atp.reenqueue(task)
    with pytest.raises((AttemptSuperseded, InvalidTransition)):
        engine.fail_or_retry(task.pk, "late", attempt=current.attempt, daemon=daemon)
    assert Instance.objects.get(pk=task.pk).retries == 0


@pytest.mark.parametrize("parameters, message", [
    ({"retry_limit": -1}, "retry_limit must be an integer"),
    ({"min_backoff": 0}, "min_backoff must be a positive"),
    ({"min_backoff": 20, "max_backoff": 10}, "min_backoff (0:00:20) is longer than max_backoff"),
    ({"max_doublings": 63}, "max_doublings must be an integer from 0 to 62"),
    ({"retry_jitter": "yes"}, "retry_jitter must be True or False"),
])
def test_a_bad_policy_is_refused(db, parameters, message):
    from atp.exceptions import InvalidParameter

    with pytest.raises(InvalidParameter) as refused:
        atp.register_task_type("tests.bad", "tests.handlers.fail", **parameters)
    assert message in str(refused.value)


def test_a_prefetched_attempt_that_failed_gets_its_start_then_its_retry(retried_type, daemon):
    from atp.daemon.recording import record
    from atp.engine.outcomes import Outcome

    task = atp.enqueue("tests.retried")
    claimed = claim_exactly(task, daemon)  # SCHEDULED: its start is not written
    failed = Outcome.failed(task.pk, claimed.attempt, "Traceback: boom", may_retry=True)
    assert record(failed.since_start(0.5), daemon)
    history = list(LogRecord.objects.filter(instance=task).values_list("status", flat=True))
    assert history == [Status.ACCEPTED, Status.SCHEDULED, Status.RUNNING, Status.ACCEPTED]
    assert Instance.objects.get(pk=task.pk).retries == 1


def test_an_operators_reenqueue_gives_a_failed_task_its_retries_again(db, daemon):
    atp.register_task_type("tests.once", "tests.handlers.fail", retry_limit=1, min_backoff=1)
    task = atp.enqueue("tests.once")
    for _ in range(2):
        current = running(task, daemon)
        engine.fail_or_retry(task.pk, "boom", attempt=current.attempt, daemon=daemon)
        come_due(task) if Task.objects.filter(pk=task.pk).exists() else None
    assert Instance.objects.get(pk=task.pk).status == Status.FAILED
    atp.reenqueue(task)
    assert Instance.objects.get(pk=task.pk).retries == 0
    current = running(task, daemon)
    engine.fail_or_retry(task.pk, "boom again", attempt=current.attempt, daemon=daemon)
    assert Instance.objects.get(pk=task.pk).status == Status.ACCEPTED


def test_a_first_wait_longer_than_the_longest_is_refused_against_what_is_stored(db):
    from atp.exceptions import InvalidParameter

    with pytest.raises(InvalidParameter, match="longer than max_backoff"):
        atp.register_task_type("tests.slow", "tests.handlers.fail", min_backoff=7200)
    atp.register_task_type("tests.slow", "tests.handlers.fail", max_backoff=60)
    with pytest.raises(InvalidParameter, match="longer than max_backoff"):
        engine.update_task_type("tests.slow", min_backoff=61)
    assert atp.get_type("tests.slow").min_backoff == 0.1 * S
