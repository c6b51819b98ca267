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
