"""A single enqueue on PostgreSQL is one round trip: one statement of data-modifying
CTEs that also wakes the daemons (pg_notify), checked against the task type as it was read."""

import contextlib

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

import atp
from atp.engine.engines import engine
from atp.engine.notify import QUEUE_CHANNEL
from atp.engine.types import update_task_type
from atp.exceptions import InputsTooLarge, TaskAlreadyExists, TaskTypeNotFound
from atp.models import Inputs, Instance, LogRecord, Task, Type
from atp.states import Status

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _postgresql_engine():
    if engine().name != "postgresql":
        pytest.skip("the PostgreSQL engine's enqueue")


@contextlib.contextmanager
def _listening():
    """Yield the list of the channels notified while the block ran (filled at its end)."""
    import psycopg

    settings = connection.settings_dict
    heard = []
    with psycopg.connect(host=settings["HOST"] or None, port=settings["PORT"] or None,
                         user=settings["USER"], password=settings["PASSWORD"] or None,
                         dbname=settings["NAME"], autocommit=True) as listener:
        listener.execute(f"LISTEN {QUEUE_CHANNEL}")
        yield heard
        heard.extend(note.channel for note in listener.notifies(timeout=2, stop_after=1))


def _counts():
    return [model.objects.count() for model in (Instance, Task, Inputs, LogRecord)]


def test_a_single_enqueue_is_one_round_trip_that_writes_everything(postgres_only, noop_type):
    # A name without a de-duplication window (with one, see test_named_tasks.py).
    update_task_type("tests.noop", dedup_window=None)
    atp.enqueue("tests.noop")  # reads the type once
    with _listening() as heard, CaptureQueriesContext(connection) as queries:
        instance = atp.enqueue("tests.noop", {"n": 1}, identifier="job-1", priority=4)
    assert len(queries) == 1, [(query["sql"] or "")[:80] for query in queries]
    assert heard == [QUEUE_CHANNEL]  # the same statement woke the daemons, at its commit

    stored = Instance.objects.get(pk=instance.pk)
    assert (stored.identifier, stored.priority, stored.status) == ("job-1", 4, Status.ACCEPTED)
    assert (stored.created, stored.updated) == (instance.created, instance.created)
    task = Task.objects.get(pk=instance.pk)
    assert (task.identifier, task.priority, task.enqueued, task.not_before) == (
        "job-1", 4, instance.created, instance.created)
    assert stored.load_inputs() == {"n": 1}
    [record] = LogRecord.objects.filter(instance=instance)
    assert (record.status, record.time, record.message) == (Status.ACCEPTED, instance.created,
                                                            "enqueued")


def test_a_duplicate_in_one_round_trip_writes_nothing(postgres_only, noop_type):
    atp.enqueue("tests.noop", identifier="job-1")
    before = _counts()
    with pytest.raises(TaskAlreadyExists):
        atp.enqueue("tests.noop", identifier="job-1")
    assert _counts() == before
    with transaction.atomic():  # and the caller's transaction goes on
        with pytest.raises(TaskAlreadyExists):
            atp.enqueue("tests.noop", identifier="job-1")
        atp.enqueue("tests.noop", identifier="job-2")
    assert _counts() == [count + 1 for count in before]


def test_a_type_changed_elsewhere_is_read_again(postgres_only, noop_type):
    atp.enqueue("tests.noop")  # the type as read now: the default input limit
    # Another process lowers the limit, then raises it: each enqueue obeys the type
    # as it is, not as this process read it.
    Type.objects.filter(pk=noop_type.pk).update(max_input_bytes=20)
    with pytest.raises(InputsTooLarge):
        atp.enqueue("tests.noop", {"text": "x" * 100})
    Type.objects.filter(pk=noop_type.pk).update(max_input_bytes=1000)
    instance = atp.enqueue("tests.noop", {"text": "x" * 100})
    assert Instance.objects.get(pk=instance.pk).load_inputs() == {"text": "x" * 100}


def test_a_type_removed_and_registered_again_is_found_again(postgres_only, noop_type):
    atp.enqueue("tests.noop")
    Instance.objects.all().delete()
    atp.unregister_task_type("tests.noop")
    with pytest.raises(TaskTypeNotFound):
        atp.enqueue("tests.noop")
    again = atp.register_task_type("tests.noop", "tests.handlers.noop")
    assert again.pk != noop_type.pk
    instance = atp.enqueue("tests.noop")
    assert Instance.objects.get(pk=instance.pk).type_id == again.pk
