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
def test_a_turn_that_spends_its_budget_leaves_the_rest_to_the_next_turn_with_the_next_round():
    first, second = ended("tests.first", 3), ended("tests.second", 2)
    # The budget is spent at the first step of each turn: a step a turn.
    turns = turns_of(Retention(clock=Clock(tick=retention.BUDGET_SECONDS)), first, second)
    assert {wait for wait, _ in turns[:-1]} == {0.0}
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
        assert sweep.purge() == 0.0
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


@override_settings(ATP_PURGE_BATCH_SIZE=8)
def test_quick_full_steps_grow_to_the_batch_size_and_slow_ones_shrink(monkeypatch):
    """Steps of 50 tasks, a turn 50 ms after the last, purged about 300 tasks a second in
    make bench's stream of 2,000 a second: the task table grew without bound. A step
    that came back full in less than half the budget makes the next twice as large."""
    monkeypatch.setattr(retention, "STEP_TASKS", 2)
    monkeypatch.setattr(retention, "MIN_STEP_TASKS", 1)
    steps, purge = [], retention.engine.purge_type_due
    monkeypatch.setattr(retention.engine, "purge_type_due",
                        lambda type_id, size: steps.append((type_id, size)) or purge(type_id, size))
    many = ended("tests.many", 30)
    turns = turns_of(Retention(clock=Clock(tick=retention.BUDGET_SECONDS / 8)), many)
    # The last found none: the sweep is done. (The other types had nothing due.)
    assert [size for type_id, size in steps if type_id == many.pk] == [2, 4, 8, 8, 8, 8]
    assert {wait for wait, _ in turns[:-1]} == {0.0} and left(many) == 0
    # A step that takes longer than the budget makes the next half as large.
    steps.clear()
    slow = Retention(clock=Clock(tick=retention.BUDGET_SECONDS * 1.5))
    slow.step = 8
    more = ended("tests.more", 12)
    turns_of(slow, more)
    assert [size for type_id, size in steps if type_id == more.pk] == [8, 4, 2] and left(more) == 0


@pytest.mark.parametrize("heartbeat, sizes", [(100, [8, 4, 2]), (0.001, [2, 4, 8])])
def test_a_sweep_that_falls_behind_grows_its_steps_whatever_they_take(
        monkeypatch, settings, heartbeat, sizes):
    """Steps that keep to the budget cost a task about three times what it costs in a step
    of 500: while the tasks end faster than such steps purge them, the sweep is never
    done. Once it is not done after a heartbeat interval, its steps grow."""
    settings.ATP_PURGE_BATCH_SIZE, settings.ATP_HEARTBEAT_INTERVAL_SECONDS = 8, heartbeat
    monkeypatch.setattr(retention, "MIN_STEP_TASKS", 1)
    steps, purge = [], retention.engine.purge_type_due
    monkeypatch.setattr(retention.engine, "purge_type_due",
                        lambda type_id, size: steps.append((type_id, size)) or purge(type_id, size))
    many = ended("tests.many", 14)
    slow = Retention(clock=Clock(tick=retention.BUDGET_SECONDS * 1.5))  # each step too long
    slow.step = sizes[0]
    turns_of(slow, many)
    assert [size for type_id, size in steps if type_id == many.pk][:3] == sizes
    assert left(many) == 0
