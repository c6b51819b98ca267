"""A type's retry policy with a real daemon: failures retried after their backoff."""

import datetime

import pytest

import atp
from atp.models import Instance, LogRecord
from atp.states import Status
from tests.processes import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_failing_task_is_retried_until_it_succeeds(start_daemon):
    atp.register_task_type("tests.flaky", "tests.handlers.fail_then_succeed", retry_limit=3,
                           min_backoff=0.2, max_backoff=1)
    task = atp.enqueue("tests.flaky", {"fails": 2})
    daemon = start_daemon("--workers", "2")
    wait_until(lambda: Instance.objects.get(pk=task.pk).status == Status.FINISHED, 30,
               message="the task finished", output=daemon.output)
    instance = Instance.objects.get(pk=task.pk)
    assert (instance.retries, instance.restarts, instance.attempt) == (2, 0, 3)
    assert atp.get_response(instance).json() == {"retry_count": 2, "execution_count": 2}
    history = list(LogRecord.objects.filter(instance=task).values_list("status", "message"))
    retried = [message for status, message in history if status == Status.ACCEPTED][1:]
    assert len(retried) == 2
    assert "ValueError: failure 1" in retried[0] and "retry 1 (retry_limit 3)" in retried[0]
    assert "ValueError: failure 2" in retried[1] and "in 0.4 s" in retried[1]


def test_a_task_out_of_retries_fails_with_its_last_traceback(start_daemon):
    atp.register_task_type("tests.flaky", "tests.handlers.fail_then_succeed", retry_limit=1,
                           min_backoff=0.1)
    task = atp.enqueue("tests.flaky", {"fails": 5})
    daemon = start_daemon("--workers", "1")
    wait_until(lambda: Instance.objects.get(pk=task.pk).status == Status.FAILED, 30,
               message="the task failed", output=daemon.output)
    last = LogRecord.objects.filter(instance=task).last()
    assert "ValueError: failure 2" in last.message
    assert "not retried: retry_limit 1 reached" in last.message


def test_an_idle_daemon_starts_a_delayed_task_on_time_not_at_its_next_poll(start_daemon):
    """Polls every 3 s; the task comes due 1.2 s after the poll that finds it waiting.
    Claimed at the poll after that, it would start 1.8 s late."""
    atp.register_task_type("tests.noop", "tests.handlers.noop")
    daemon = start_daemon("--workers", "1", "--poll-interval", "3")
    first = atp.enqueue("tests.noop")  # its claim resets the poll timer
    wait_until(lambda: Instance.objects.get(pk=first.pk).status == Status.FINISHED, 30,
               message="the first task finished", output=daemon.output)
    delayed = atp.enqueue("tests.noop", countdown=4)
    due = delayed.created + datetime.timedelta(seconds=4)
    wait_until(lambda: Instance.objects.get(pk=delayed.pk).status == Status.FINISHED, 30,
               message="the delayed task finished", output=daemon.output)
    started = Instance.objects.get(pk=delayed.pk).started
    assert due <= started < due + datetime.timedelta(seconds=0.5), started - due


def test_a_task_that_snoozes_runs_again_after_each_snooze_without_a_retry(start_daemon):
    atp.register_task_type("tests.snoozing", "tests.handlers.snooze", retry_limit=0,
                           max_restarts=0, max_snoozes=3)
    task = atp.enqueue("tests.snoozing", {"times": 2, "seconds": 0.3})
    daemon = start_daemon("--workers", "2")
    wait_until(lambda: Instance.objects.get(pk=task.pk).status == Status.FINISHED, 30,
               message="the task finished", output=daemon.output)
    instance = Instance.objects.get(pk=task.pk)
    assert (instance.snoozes, instance.retries, instance.restarts, instance.attempt) == (2, 0, 0, 3)
    assert atp.get_response(instance).json() == {
        "attempt": 3, "snoozes": 2, "execution_count": 0, "restarts": 0}
    history = list(LogRecord.objects.filter(instance=task).values_list("status", "time", "message"))
    snoozed = [(time, message) for status, time, message in history if status == Status.ACCEPTED][1:]
    assert [message.split("\n")[0] for _, message in snoozed] == [
        "not ready at attempt 1", "not ready at attempt 2"]
    assert "snoozed (snooze 2 of at most 3)" in snoozed[1][1]
    starts = [time for status, time, _ in history if status == Status.RUNNING]
    for (_, message), started in zip(snoozed, starts[1:], strict=True):
        due = datetime.datetime.fromisoformat(message.split("due at ")[1].split(",")[0])
        assert started >= due, "ran before it was due"
    assert "snoozed" in daemon.output()


def test_a_task_that_snoozes_too_often_fails(start_daemon):
    atp.register_task_type("tests.snoozing", "tests.handlers.snooze", max_snoozes=1)
    task = atp.enqueue("tests.snoozing", {"seconds": 0.1})
    daemon = start_daemon("--workers", "1")
    wait_until(lambda: Instance.objects.get(pk=task.pk).status == Status.FAILED, 30,
               message="the task failed", output=daemon.output)
    instance = Instance.objects.get(pk=task.pk)
    assert (instance.snoozes, instance.retries, instance.attempt) == (1, 0, 2)
    assert LogRecord.objects.filter(instance=task).last().message == (
        "not ready at attempt 2\nsnoozed again after 1 snooze, its type's max_snoozes: "
        "failed instead")


def test_a_daemon_cancels_a_task_that_expires_while_it_waits(start_daemon):
    atp.register_task_type("tests.noop", "tests.handlers.noop")
    atp.register_task_type("tests.held", "tests.handlers.noop")
    atp.pause_type("tests.held")  # nothing claims it: it can only wait, then expire
    expiring = atp.enqueue("tests.held", expires=0.5)
    kept = atp.enqueue("tests.held", expires=3600)
    ran = atp.enqueue("tests.noop", expires=3600)
    daemon = start_daemon("--workers", "1")
    wait_until(lambda: Instance.objects.get(pk=expiring.pk).status == Status.CANCELLED, 30,
               message="the expired task was cancelled", output=daemon.output)
    wait_until(lambda: Instance.objects.get(pk=ran.pk).status == Status.FINISHED, 30,
               message="the task that had time ran", output=daemon.output)
    assert Instance.objects.get(pk=kept.pk).status == Status.ACCEPTED
    last = LogRecord.objects.filter(instance=expiring).last()
    assert last.message.startswith("expired: not started by ")
    assert last.time >= Instance.objects.get(pk=expiring.pk).expires
    assert "1 waiting task(s) expired: cancelled" in daemon.output()
