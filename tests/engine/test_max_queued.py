"""A type's queue depth limit (``max_queued``) and the limit of the whole queue
(``ATP_MAX_QUEUED_TOTAL``): enqueue raises ``QueueFull`` beyond them, writing nothing."""

import pytest
from django.test import override_settings

import atp
from atp import engine
from atp.exceptions import QueueFull
from atp.models import Instance
from tests.factories import claim_exactly
from tests.interleave import interleave

pytestmark = pytest.mark.django_db


@pytest.fixture
def bounded(db):
    return atp.register_task_type("tests.bounded", "tests.handlers.noop", max_queued=3)


def test_a_full_queue_refuses_more_and_writes_nothing(bounded, daemon):
    first = atp.enqueue("tests.bounded")
    atp.enqueue_many("tests.bounded", [{}, {}])
    before = Instance.objects.count()
    with pytest.raises(QueueFull, match="holds 3 tasks and takes at most 3 .max_queued."):
        atp.enqueue("tests.bounded")
    with pytest.raises(QueueFull):
        atp.enqueue_many("tests.bounded", [{}])
    assert Instance.objects.count() == before
    # A running task still counts; one that ended leaves room.
    claimed = claim_exactly(first, daemon)
    with pytest.raises(QueueFull):
        atp.enqueue("tests.bounded")
    engine.start(claimed, attempt=claimed.attempt, daemon=daemon)
    engine.finish(claimed, attempt=claimed.attempt, daemon=daemon)
    atp.enqueue("tests.bounded")


def test_a_batch_that_does_not_fit_is_refused_whole(bounded):
    atp.enqueue("tests.bounded")
    with pytest.raises(QueueFull, match="3 more do not fit"):
        atp.enqueue_many("tests.bounded", [{}] * 3)
    assert Instance.objects.count() == 1


def test_a_limit_set_after_the_type_was_read_holds_at_once(noop_type):
    atp.enqueue("tests.noop")  # the type is read, and cached by the engine
    atp.enqueue("tests.noop")
    engine.update_task_type("tests.noop", max_queued=2)
    with pytest.raises(QueueFull):
        atp.enqueue("tests.noop")


def test_the_whole_queue_has_a_limit_too(noop_type, bounded):
    atp.enqueue("tests.noop")
    atp.enqueue("tests.bounded")
    with override_settings(ATP_MAX_QUEUED_TOTAL=3):
        atp.enqueue("tests.noop")
        with pytest.raises(QueueFull, match="ATP_MAX_QUEUED_TOTAL"):
            atp.enqueue("tests.bounded")


@pytest.mark.django_db(transaction=True)
def test_two_enqueues_racing_for_the_last_place_take_it_once(db):
    atp.register_task_type("tests.bounded", "tests.handlers.noop", max_queued=2)
    atp.enqueue("tests.bounded")
    first, second = interleave(lambda: atp.enqueue("tests.bounded"),
                               lambda: atp.enqueue("tests.bounded"),
                               pause_after=r'SELECT COUNT\(\*\)')
    outcomes = [first, second]
    assert sum(outcome.error is None for outcome in outcomes) == 1
    assert [type(outcome.error) for outcome in outcomes if outcome.error] == [QueueFull]
    assert Instance.objects.count() == 2
