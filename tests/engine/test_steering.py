import datetime
import time

import pytest

import atp
from atp import engine
from atp.exceptions import InvalidTransition, NotDelayed, TaskAlreadyExists, TaskNotFound
from atp.models import Inputs, Instance, LogRecord, Task
from atp.states import IN_FLIGHT, LIVE, TRANSITIONS, Status
from tests.factories import TaskFactory, snapshot

pytestmark = pytest.mark.django_db


# Transitions that only the queue makes, whatever the table allows.
QUEUE_ONLY = {(Status.ACCEPTED, Status.SCHEDULED)}


@pytest.mark.parametrize("current", list(Status))
@pytest.mark.parametrize("target", list(Status))
def test_set_status_follows_the_state_table_exactly(noop_type, current, target):
    instance = TaskFactory(type=noop_type, status=current)
    before = snapshot(instance)
    if target in TRANSITIONS[current] and (current, target) not in QUEUE_ONLY:
        returned = atp.set_status(instance, target, "by hand")
        assert returned is instance and instance.status == target
        record = LogRecord.objects.filter(instance=instance).last()
        assert record.status == target
        # An operator never takes a lease: the task of a daemon keeps its queue row
        # until that daemon lets go of it.
        row = Task.objects.filter(pk=instance.pk).first()
        assert (row is not None) == (target in LIVE or current in IN_FLIGHT)
        assert (row is not None and row.daemon_id is not None) == (current in IN_FLIGHT)
    else:
        with pytest.raises(InvalidTransition):
            atp.set_status(instance, target)
        assert snapshot(instance) == before


def test_set_status_refuses_a_state_that_does_not_exist(noop_type):
    instance = TaskFactory(type=noop_type)
    with pytest.raises(InvalidTransition, match="'DONE' is not a task state"):
        atp.set_status(instance, "DONE")


def test_an_illegal_transition_says_why(noop_type):
    instance = TaskFactory(type=noop_type, status=Status.FINISHED)
    with pytest.raises(InvalidTransition, match=f"cannot move task #{instance.pk} to RUNNING: it is already FINISHED"):
        atp.resume(instance)
    with pytest.raises(TaskNotFound, match="task #999999 does not exist"):
        atp.cancel(999999)


@pytest.mark.parametrize("status", IN_FLIGHT)
def test_reenqueue_leaves_a_running_task_to_its_daemon_until_it_lets_go(noop_type, status, daemon):
    instance = TaskFactory(type=noop_type, status=status, daemon=daemon)
    atp.reenqueue(instance)
    assert (instance.status, instance.restarts) == (Status.ACCEPTED, 0)
    lease = Task.objects.get(pk=instance.pk)
    assert (lease.daemon, lease.deadline, lease.paused_since) == (daemon, None, None)
    other = engine.register_daemon()
    assert atp.dequeue(other) == [], "claimable while its worker may still run"
    engine.release(instance, daemon=daemon)
    [again] = atp.dequeue(other)
    assert (again.pk, again.attempt) == (instance.pk, instance.attempt + 1)


@pytest.mark.parametrize("status", [Status.FAILED, Status.CANCELLED])
def test_reenqueue_retries_an_ended_task_with_a_fresh_restart_budget(noop_type, status):
    instance = TaskFactory(type=noop_type, status=status, priority=4)
    Instance.objects.filter(pk=instance.pk).update(restarts=3)
    atp.reenqueue(instance)
    assert (instance.status, instance.restarts, instance.finished) == (Status.ACCEPTED, 0, None)
    assert Task.objects.get(pk=instance.pk).priority == 4
    assert LogRecord.objects.filter(instance=instance).last().message == f"re-enqueued after {status}"


def test_reenqueue_of_an_ended_task_whose_identifier_was_taken_is_refused(noop_type):
    atp.register_task_type("tests.noop", "tests.handlers.noop", dedup_window=None)
    failed = TaskFactory(type=noop_type, identifier="daily", status=Status.FAILED)
    atp.enqueue("tests.noop", identifier="daily")
    before = snapshot(failed)
    with pytest.raises(TaskAlreadyExists, match="identifier 'daily'"):
        atp.reenqueue(failed)
    assert snapshot(failed) == before


@pytest.mark.parametrize("status, reason", [(Status.ACCEPTED, "already ACCEPTED"), (Status.FINISHED, "already FINISHED")])
def test_reenqueue_refuses_a_queued_or_finished_task(noop_type, status, reason):
    instance = TaskFactory(type=noop_type, status=status)
    with pytest.raises(InvalidTransition, match=reason):
        atp.reenqueue(instance)


def test_a_paused_task_does_not_use_up_its_time_out(noop_type):
    instance = TaskFactory(type=noop_type, status=Status.RUNNING)
    deadline = Task.objects.get(pk=instance.pk).deadline
    atp.pause(instance)
    assert Task.objects.get(pk=instance.pk).paused_since is not None
    time.sleep(0.2)
    atp.resume(instance)
    lease = Task.objects.get(pk=instance.pk)
    assert lease.paused_since is None
    assert lease.deadline - deadline >= datetime.timedelta(seconds=0.19)


@pytest.mark.parametrize("status", LIVE)
def test_cancel_ends_a_live_task_and_its_daemon_lets_go_of_it(noop_type, status, daemon):
    instance = TaskFactory(type=noop_type, status=status, daemon=daemon)
    atp.cancel(instance, "no longer needed")
    assert instance.status == Status.CANCELLED and instance.finished is not None
    assert LogRecord.objects.filter(instance=instance).last().message == "no longer needed"
    assert Task.objects.filter(pk=instance.pk).exists() == (status in IN_FLIGHT)
    engine.release(instance, daemon=daemon)
    assert not Task.objects.filter(pk=instance.pk).exists()


def test_a_cancelled_task_retried_before_its_worker_stopped_waits_for_it(noop_type, daemon):
    instance = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)
    atp.cancel(instance)
    atp.reenqueue(instance)
    assert instance.status == Status.ACCEPTED
    other = engine.register_daemon()
    assert atp.dequeue(other) == []
    engine.release(instance, daemon=daemon)
    assert [t.pk for t in atp.dequeue(other)] == [instance.pk]


def test_verbs_accept_a_primary_key_and_return_the_task(noop_type):
    instance = TaskFactory(type=noop_type, status=Status.RUNNING)
    paused = atp.pause(instance.pk)
    assert isinstance(paused, Instance) and paused.status == Status.PAUSED
    assert instance.status == Status.RUNNING  # an object not passed in is not touched


# -- run again and run now ------------------------------------------------------------

ENDED = [Status.FINISHED, Status.FAILED, Status.CANCELLED]


@pytest.mark.parametrize("status", ENDED)
def test_run_again_queues_a_new_task_with_the_same_inputs_and_leaves_the_old_one(
        noop_type, status, django_user_model):
    old = TaskFactory(type=noop_type, status=status, inputs={"page": [1, 2]},
                      identifier="report-7", priority=5, tag="red")
    before = snapshot(old)
    operator = django_user_model.objects.create_user("ops")
    new = atp.run_again(old, by=operator)
    assert snapshot(old) == before
    assert (new.type_id, new.status, new.priority, new.tag) == (
        noop_type.pk, Status.ACCEPTED, 5, "red")
    assert new.pk != old.pk and new.identifier != "report-7"
    assert Instance.objects.get(pk=new.pk).load_inputs() == {"page": [1, 2]}
    note = LogRecord.objects.filter(instance=new).last()
    assert (note.status, note.actor, note.message) == (
        None, "ops", f"a run again of task #{old.pk}")
    claimed = engine.dequeue(engine.register_daemon())
    assert [task.pk for task in claimed] == [new.pk]


@pytest.mark.parametrize("status", LIVE)
def test_run_again_refuses_a_task_that_has_not_ended(noop_type, status):
    live = TaskFactory(type=noop_type, status=status)
    before = snapshot(live)
    with pytest.raises(InvalidTransition, match=f"task #{live.pk} is {status}: only an ended"):
        atp.run_again(live)
    assert snapshot(live) == before
    assert Instance.objects.count() == 1


def test_run_again_of_a_task_that_does_not_exist_says_so(db):
    with pytest.raises(TaskNotFound):
        atp.run_again(999999)


def test_run_now_makes_a_delayed_task_runnable(noop_type, django_user_model):
    delayed = TaskFactory(type=noop_type, countdown=3600)
    daemon = engine.register_daemon()
    assert engine.dequeue(daemon) == []
    returned = atp.run_now(delayed, by="ops")
    assert returned.status == Status.ACCEPTED
    note = LogRecord.objects.filter(instance=delayed).last()
    assert (note.status, note.actor) == (None, "ops")
    assert note.message.startswith("run now (it was due at ")
    assert [task.pk for task in engine.dequeue(daemon)] == [delayed.pk]


def test_run_now_refuses_a_task_that_is_not_delayed(noop_type):
    runnable = TaskFactory(type=noop_type)
    before = snapshot(runnable)
    with pytest.raises(NotDelayed, match=f"task #{runnable.pk} is not delayed"):
        atp.run_now(runnable)
    assert snapshot(runnable) == before


@pytest.mark.parametrize("status", [s for s in Status if s != Status.ACCEPTED])
def test_run_now_refuses_a_task_that_is_not_queued(noop_type, status):
    task = TaskFactory(type=noop_type, status=status)
    before = snapshot(task)
    with pytest.raises(InvalidTransition, match=f"task #{task.pk} is {status}: only a queued"):
        atp.run_now(task)
    assert snapshot(task) == before
    with pytest.raises(TaskNotFound):
        atp.run_now(999999)


def test_run_again_copies_a_pickle_as_stored_without_unpickling_it(pickle_enabled, tmp_path):
    from tests.test_serialization import Tripwire

    atp.register_task_type("tests.pickled", "tests.handlers.echo", input_format="pickle")
    old = TaskFactory(type=atp.get_type("tests.pickled"), status=Status.CANCELLED,
                      inputs=Tripwire(tmp_path / "unpickled"))
    new = atp.run_again(old)
    assert not (tmp_path / "unpickled").exists()
    stored = Inputs.objects.values_list("input_format", "data")
    assert stored.get(pk=new.pk) == stored.get(pk=old.pk)
