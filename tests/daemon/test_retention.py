"""The daemon's retention (``atp.daemon.retention``): ended tasks past their type's
retention purged in turns of a bounded time, a step of tasks at a time, so that the
supervisor's loop goes on between them; on a clock the test moves."""

import datetime

import pytest
from django.db.models import F
from django.test import override_settings

import atp
from atp.daemon import retention
from atp.daemon.config import DaemonConfig
from atp.daemon.retention import Retention
from atp.daemon.supervisor import Supervisor
from atp.models import Instance
from atp.states import Status
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


class Clock:
    """A clock that moves ``tick`` seconds each time it is read."""

    def __init__(self, tick):
        self.now, self.tick = 0.0, tick

    def __call__(self):
        self.now += self.tick
        return self.now


def ended(identifier, count, *, minutes_ago=5):
    task_type = atp.register_task_type(identifier, "tests.handlers.noop", retention=60)
    tasks = [TaskFactory(type=task_type, status=Status.FINISHED) for _ in range(count)]
    Instance.objects.filter(pk__in=[task.pk for task in tasks]).update(
        finished=F("finished") - datetime.timedelta(minutes=minutes_ago))
    return task_type


def left(task_type):
    return Instance.objects.filter(type=task_type).count()


def turns_of(sweep, *types):
    """Run ``sweep`` turn after turn until its sweep is done; return, for each turn, what it
    returned and how many tasks of ``types`` it deleted."""
    turns, before = [], sum(map(left, types))
    while True:
        wait = sweep.purge()
        after = sum(map(left, types))
        turns.append((wait, before - after))
        before = after
        if wait is None:
            return turns


@override_settings(ATP_PURGE_BATCH_SIZE=2)
def test_a_turn_that_spends_its_budget_leaves_the_rest_to_the_next_turn_a_moment_later():
    first, second = ended("tests.first", 3), ended("tests.second", 2)
    # The budget is spent at the first step of each turn: a step a turn.
    turns = turns_of(Retention(clock=Clock(tick=retention.BUDGET_SECONDS)), first, second)
    assert {wait for wait, _ in turns[:-1]} == {retention.GAP_SECONDS}
    # One step deletes at most 2 tasks (ATP_PURGE_BATCH_SIZE, smaller than STEP_TASKS);
    # the types full at their step are stepped again, in turn, once every type had its.
    assert [gone for _, gone in turns if gone] == [2, 2, 1]
    assert (left(first), left(second)) == (0, 0)


@override_settings(ATP_PURGE_BATCH_SIZE=2)
def test_within_its_budget_a_turn_goes_through_every_type_then_the_sweep_is_done():
    first, second = ended("tests.first", 5), ended("tests.second", 3)
    assert Retention(clock=Clock(tick=0)).purge() is None
    assert (left(first), left(second)) == (0, 0)


def test_a_type_with_nothing_past_its_retention_keeps_its_tasks():
    recent = ended("tests.recent", 2, minutes_ago=0)
    old = ended("tests.old", 2)
    assert Retention(clock=Clock(tick=0)).purge() is None
    assert (left(recent), left(old)) == (2, 0)


@override_settings(ATP_PURGE_BATCH_SIZE=1)
def test_a_sweep_purges_each_type_as_it_is_now_not_as_the_sweep_found_it():
    kept = ended("tests.kept", 3)
    sweep = Retention(clock=Clock(tick=retention.BUDGET_SECONDS))
    while left(kept) == 3:  # the sweep reaches it, and deletes one: more may be due
        assert sweep.purge() == retention.GAP_SECONDS
    atp.register_task_type("tests.kept", "tests.handlers.noop", retention=None)
    assert turns_of(sweep, kept)[-1] == (None, 0)
    assert left(kept) == 2


@override_settings(ATP_PURGE_BATCH_SIZE=2)
def test_a_type_whose_tasks_end_faster_than_it_is_purged_holds_no_other_back():
    busy, quiet = ended("tests.busy", 2), ended("tests.quiet", 4)
    sweep = Retention(clock=Clock(tick=retention.BUDGET_SECONDS))  # a step a turn
    for _ in range(40):
        ended("tests.busy", 2)  # as many as a step deletes, between any two turns
        sweep.purge()
        if not left(quiet):
            break
    assert left(quiet) == 0
    assert left(busy) >= 2  # it never ran out: its steps came back full throughout


@override_settings(ATP_PURGE_BATCH_SIZE=2)
def test_a_type_whose_step_fails_is_left_to_the_next_sweep_the_others_go_on(monkeypatch):
    failing, other = ended("tests.failing", 2), ended("tests.other", 2)
    purge_type_due = retention.engine.purge_type_due

    def refusing(type_id, batch_size):
        if type_id == failing.pk:
            raise RuntimeError("refused")
        return purge_type_due(type_id, batch_size)

    monkeypatch.setattr(retention.engine, "purge_type_due", refusing)
    sweep = Retention(clock=Clock(tick=0))
    with pytest.raises(RuntimeError):  # the duty logs it (``contain``)
        sweep.purge()
    assert turns_of(sweep, other)[-1][0] is None
    assert (left(failing), left(other)) == (2, 0)


@override_settings(ATP_PURGE_BATCH_SIZE=2)
def test_the_daemons_purge_duty_holds_its_loop_for_a_step_not_a_batch_of_every_type(
        monkeypatch):
    """A turn of the supervisor's purge once deleted a full batch of every type, 500 tasks
    each, the loop claiming and settling nothing meanwhile (200–300 ms under make soak)."""
    types = [ended(f"tests.type{number}", 3) for number in range(3)]
    monkeypatch.setattr(retention, "BUDGET_SECONDS", 0)  # spent after the first step
    [duty] = [duty for duty in Supervisor(DaemonConfig(workers=1)).duties.duties
              if duty.what.startswith("purging")]
    turns = []
    while not turns or turns[-1][0] is not None:
        before = sum(map(left, types))
        turns.append((duty.run(), before - sum(map(left, types))))
    assert max(gone for _, gone in turns) == 2
    assert sum(gone for _, gone in turns) == 9
