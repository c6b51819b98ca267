"""When the first task waiting for its time becomes runnable (``next_due``), on each engine."""

import datetime

import pytest

import atp
from atp import engine
from atp.models import Task

pytestmark = pytest.mark.django_db


def test_nothing_waiting_for_its_time_is_none(noop_type):
    assert engine.next_due([noop_type.pk], 3600) is None
    atp.enqueue("tests.noop")  # runnable now: not waiting for its time
    assert engine.next_due([noop_type.pk], 3600) is None
    assert engine.next_due([], 3600) is None


def test_the_first_due_across_priorities(noop_type):
    atp.enqueue("tests.noop", countdown=30, priority=5)
    atp.enqueue("tests.noop", countdown=8, priority=-3)
    atp.enqueue("tests.noop", countdown=20)
    assert 7 < engine.next_due([noop_type.pk], 3600) <= 8


def test_only_unleased_unpaused_tasks_of_the_types_asked_count(noop_type, daemon):
    atp.register_task_type("tests.other", "tests.handlers.noop")
    other = atp.get_type("tests.other")
    atp.enqueue("tests.other", countdown=3)
    held = atp.enqueue("tests.noop", countdown=4)
    Task.objects.filter(pk=held.pk).update(paused_since=datetime.datetime.now(datetime.UTC))
    leased = atp.enqueue("tests.noop", countdown=5)
    Task.objects.filter(pk=leased.pk).update(daemon=daemon)
    assert engine.next_due([noop_type.pk], 3600) is None
    assert 2 < engine.next_due([noop_type.pk, other.pk], 3600) <= 3


def test_a_due_time_in_the_past_is_not_waiting(noop_type):
    atp.enqueue("tests.noop", eta=datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1))
    assert engine.next_due([noop_type.pk], 3600) is None


def test_a_due_time_beyond_the_bound_is_not_looked_for(noop_type):
    atp.enqueue("tests.noop", countdown=30)
    assert engine.next_due([noop_type.pk], 10) is None
    assert 29 < engine.next_due([noop_type.pk], 31) <= 30
