"""Purging a type: its waiting tasks cancelled in batches, each with the reason."""

import pytest

import atp
from atp import engine
from atp.exceptions import InvalidParameter, TaskTypeNotFound
from atp.invariants import check_queue
from atp.models import Instance, LogRecord, Task
from atp.states import Status
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


def test_every_waiting_task_is_cancelled_in_batches_with_the_reason(noop_type, daemon):
    waiting = atp.enqueue_many("tests.noop", [{}] * 7)
    delayed = atp.enqueue("tests.noop", countdown=3600)
    running = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)
    atp.register_task_type("tests.other", "tests.handlers.noop")
    other = atp.enqueue("tests.other")
    assert atp.purge_type("tests.noop", "mailing cancelled", by="ops", batch_size=3) == 8
    for task in [*waiting, delayed]:
        instance = Instance.objects.get(pk=task.pk)
        assert instance.status == Status.CANCELLED and instance.finished is not None
        last = LogRecord.objects.filter(instance=task).last()
        assert (last.status, last.message, last.actor) == (
            Status.CANCELLED, "mailing cancelled", "ops")
        assert not Task.objects.filter(pk=task.pk).exists()
    # A task a daemon holds runs on; another type is not touched.
    assert Instance.objects.get(pk=running.pk).status == Status.RUNNING
    assert Instance.objects.get(pk=other.pk).status == Status.ACCEPTED
    assert [str(v) for v in check_queue()] == []


def test_a_task_held_paused_is_purged_too(noop_type, daemon):
    task = TaskFactory(type=noop_type, status=Status.PAUSED, daemon=daemon)
    engine.hand_back(task.pk, "stopping", attempt=task.attempt, daemon=daemon)  # held
    assert atp.purge_type("tests.noop") == 1
    assert Instance.objects.get(pk=task.pk).status == Status.CANCELLED
    assert "purged: the waiting tasks of type tests.noop" in LogRecord.objects.filter(
        instance=task).last().message


@pytest.mark.parametrize("call, error", [
    (lambda: atp.purge_type("tests.nothing"), TaskTypeNotFound),
    (lambda: atp.purge_type("tests.noop", batch_size=0), InvalidParameter),
    (lambda: atp.purge_type("tests.noop", "a\x00b"), InvalidParameter),
])
def test_bad_input_is_refused_and_cancels_nothing(noop_type, call, error):
    queued = atp.enqueue("tests.noop")
    with pytest.raises(error):
        call()
    assert Instance.objects.get(pk=queued.pk).status == Status.ACCEPTED
