import datetime

import pytest

import atp
from atp import engine
from atp.exceptions import InvalidParameter, InvalidTransition, TaskNotFound
from atp.models import Inputs, Instance, LogRecord, Response, Task
from atp.states import Status
from tests.factories import TaskFactory, snapshot

pytestmark = pytest.mark.django_db


def age(instance, **delta):
    """Pretend ``instance`` ended that long ago."""
    Instance.objects.filter(pk=instance.pk).update(finished=instance.finished - datetime.timedelta(**delta))


def test_purge_deletes_ended_tasks_past_their_types_retention(db):
    short = atp.register_task_type("tests.short", "tests.handlers.noop", retention=3600)
    forever = atp.register_task_type("tests.forever", "tests.handlers.noop")
    old = [TaskFactory(type=short, status=status) for status in (Status.FINISHED, Status.FAILED, Status.CANCELLED)]
    for instance in old:
        age(instance, hours=2)
    recent = TaskFactory(type=short, status=Status.FINISHED)
    kept_forever = TaskFactory(type=forever, status=Status.FINISHED)
    age(kept_forever, days=3650)
    live = TaskFactory(type=short, status=Status.RUNNING)
    atp.set_response(old[0], "gone with it")

    assert atp.purge_finished() == 3
    assert set(Instance.objects.values_list("pk", flat=True)) == {recent.pk, kept_forever.pk, live.pk}
    for model in (Inputs, LogRecord, Response, Task):
        assert not model.objects.filter(instance_id__in=[i.pk for i in old]).exists()


def test_purge_older_than_ignores_retention_and_never_touches_live_tasks(noop_type):
    ended = [TaskFactory(type=noop_type, status=Status.FINISHED) for _ in range(5)]
    for instance in ended:
        age(instance, minutes=10)
    queued = TaskFactory(type=noop_type)
    assert atp.purge_finished(older_than=datetime.timedelta(minutes=5), batch_size=2) == 5
    assert list(Instance.objects.values_list("pk", flat=True)) == [queued.pk]


def test_purge_can_be_limited_to_one_type(noop_type):
    other = atp.register_task_type("tests.other", "tests.handlers.noop")
    mine = TaskFactory(type=noop_type, status=Status.FINISHED)
    theirs = TaskFactory(type=other, status=Status.FINISHED)
    for instance in (mine, theirs):  # ended before now, not in its very millisecond
        age(instance, seconds=1)
    assert atp.purge_finished(older_than=0, type="tests.other") == 1
    assert list(Instance.objects.values_list("pk", flat=True)) == [mine.pk]
    assert theirs.pk not in Instance.objects.values_list("pk", flat=True)


def test_purge_refuses_a_bad_age():
    with pytest.raises(InvalidParameter, match="older_than"):
        atp.purge_finished(older_than=-1)


@pytest.mark.parametrize("status", [Status.ACCEPTED, Status.FINISHED, Status.FAILED, Status.CANCELLED])
def test_delete_task_removes_a_queued_or_ended_task_with_all_it_holds(noop_type, status, row_counts):
    before = row_counts()
    instance = TaskFactory(type=noop_type, status=status)
    atp.set_response(instance, "x")
    atp.delete_task(instance)
    assert row_counts() == before


@pytest.mark.parametrize("status", [Status.SCHEDULED, Status.RUNNING, Status.PAUSED])
def test_delete_task_refuses_a_task_in_flight(noop_type, status, row_counts):
    instance = TaskFactory(type=noop_type, status=status)
    before = row_counts()
    with pytest.raises(InvalidTransition, match=f"is {status}: cancel it before deleting it"):
        atp.delete_task(instance)
    assert row_counts() == before
    with pytest.raises(TaskNotFound):
        atp.delete_task(999999)


def test_a_task_whose_worker_is_still_being_stopped_cannot_be_deleted_yet(noop_type, daemon):
    running = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)
    atp.cancel(running)
    before = snapshot(running)
    with pytest.raises(InvalidTransition, match="still stopping its last worker"):
        atp.delete_task(running)
    assert snapshot(running) == before
    engine.release(running, daemon=daemon)
    atp.delete_task(running)
    assert not Instance.objects.filter(pk=running.pk).exists()


def test_a_purge_deletes_atp_s_own_rows_a_statement_a_table():
    from django.db.models import CASCADE, SET_NULL

    from atp.engine.maintenance import _relations, _statements

    handled = {(r.related_model.__name__, r.on_delete) for r in _relations()}
    assert handled == {("Inputs", CASCADE), ("Response", CASCADE), ("LogRecord", CASCADE),
                       ("Task", CASCADE), ("TraceContext", CASCADE), ("Batch", SET_NULL),
                       ("Hold", CASCADE)}
    assert len(_statements(_relations())) == len(handled) + 1


def test_a_model_of_the_project_that_refers_to_tasks_is_left_to_django_s_collector():
    """What a statement a table cannot follow (another app's model, rows others refer to
    in turn, PROTECT) makes a purge delete as ``Instance.delete()`` does: a project's
    model with a key to a task does not stop retention."""
    from django.contrib.admin.models import LogEntry
    from django.contrib.auth.models import Permission, User
    from django.contrib.contenttypes.models import ContentType

    from atp.engine.maintenance import _relations, _statements

    def relation(model, to):
        return next(r for r in _relations(to) if r.related_model is model)

    own = _relations()
    assert _statements(own + [relation(LogEntry, User)]) is None  # another app's model
    assert _statements(own + [relation(Permission, ContentType)]) is None  # with its own


def test_a_purge_through_django_s_collector_deletes_the_same_rows(noop_type, monkeypatch):
    from atp.engine import maintenance

    monkeypatch.setattr(maintenance, "_statements", lambda relations: None)
    ended = [TaskFactory(type=noop_type, status=Status.FINISHED) for _ in range(3)]
    atp.set_response(ended[0], "kept with it until the purge")
    assert atp.purge_finished(older_than=0) == 3
    for model in (Instance, Inputs, LogRecord, Response):
        assert not model.objects.filter(**{
            "pk__in" if model is Instance else "instance_id__in": [i.pk for i in ended]}).exists()


def test_a_purge_deletes_in_chunks_of_bound_parameters(noop_type, monkeypatch):
    from atp.engine import maintenance

    monkeypatch.setattr(maintenance, "DELETE_CHUNK", 2)
    ended = [TaskFactory(type=noop_type, status=Status.FINISHED) for _ in range(5)]
    for instance in ended[:2]:
        atp.set_response(instance, "kept with it until the purge")
    assert atp.purge_finished(older_than=0) == 5
    for model in (Instance, Inputs, LogRecord, Response):
        assert not model.objects.filter(**{
            "pk__in" if model is Instance else "instance_id__in": [i.pk for i in ended]}).exists()
