"""The claim policy (``atp.daemon.claiming``): when a daemon claims, how many tasks, and
when it wakes up for the next delayed one. Plain values in, decisions out: no database,
no daemon, no clock."""

import pytest

from atp.daemon.claiming import (
    NEXT_DUE_LOOKUP_DELAY_SECONDS,
    Claim,
    ClaimPolicy,
    room,
    size,
)

POLL = 1.0
LOOKUP = NEXT_DUE_LOOKUP_DELAY_SECONDS


def settled(now=10.0, *, limit=4, taken=1):
    """Return a policy whose last claim, at ``now``, took ``taken`` of ``limit`` tasks."""
    policy = ClaimPolicy(POLL)
    policy.began(now)
    policy.claimed(limit, taken, now, is_stopping=False)
    return policy


# -- when to claim ----------------------------------------------------------------------

def test_a_daemon_claims_at_start():
    assert ClaimPolicy(POLL).is_due(0.0)


def test_a_full_claim_calls_for_another_at_once():
    assert settled(limit=4, taken=4).is_due(10.0)


def test_after_a_claim_that_took_all_that_was_runnable_the_next_waits_for_the_poll():
    policy = settled(limit=4, taken=1)
    assert not policy.is_due(10.0 + POLL - 0.001)
    assert policy.is_due(10.0 + POLL)


def test_the_poll_counts_from_when_the_claim_began_whatever_came_of_it():
    policy = settled()
    policy.began(20.0)  # a claim that failed: the database went away, say
    assert not policy.is_due(20.0 + POLL - 0.001) and policy.is_due(20.0 + POLL)


def test_a_wake_up_calls_for_a_claim():
    policy = settled()
    policy.woken()
    assert policy.is_due(10.0)


def test_tasks_the_daemon_enqueued_itself_call_for_a_claim_and_none_do_not():
    policy = settled()
    policy.enqueued(0)
    assert not policy.is_due(10.0)
    policy.enqueued(2)
    assert policy.is_due(10.0)


@pytest.mark.parametrize("has_limits", [False, True])
def test_an_end_calls_for_a_claim_only_when_a_type_it_runs_is_limited(has_limits):
    """Without limits the queue was empty at the last claim, and a new task would have
    woken the daemon; with one, a task may have waited for the place the end freed."""
    policy = settled()
    policy.task_ended(has_limits=has_limits)
    assert policy.is_due(10.0) is has_limits


def test_an_end_after_a_full_claim_leaves_the_claim_due():
    policy = settled(limit=4, taken=4)
    policy.task_ended(has_limits=False)
    assert policy.is_due(10.0)


# -- how many ---------------------------------------------------------------------------

def test_a_claim_is_for_what_the_workers_have_room_for_one_started_per_idle_worker():
    slots = {"idle": 1, "busy": 6, "full": 0}
    assert size(slots, 1, holding=False) == Claim(limit=7, start=1, slots=slots)


def test_no_claim_without_room_nor_while_claimed_tasks_are_held():
    assert size({"a": 0, "b": 0}, 0, holding=False) is None
    assert size({}, 0, holding=False) is None
    assert size({"a": 3}, 1, holding=True) is None  # given out first
    assert room({"a": 3, "b": 2}, holding=False) == 5
    assert room({"a": 3}, holding=True) == 0


# -- the next delayed task --------------------------------------------------------------

def test_the_next_due_time_is_asked_for_once_a_moment_after_a_claim_that_took_all():
    policy = settled(10.0, limit=4, taken=1)
    assert policy.take_due_lookup(10.0 + LOOKUP / 2, is_stopping=False) is None
    # It says how long ago the claim was: a rate's bucket is judged as the claim found it.
    assert policy.take_due_lookup(10.0 + LOOKUP, is_stopping=False) == pytest.approx(LOOKUP)
    assert policy.take_due_lookup(10.0 + 2 * LOOKUP, is_stopping=False) is None


def test_a_late_question_says_how_late_it_is():
    policy = settled(10.0, limit=4, taken=1)
    assert policy.take_due_lookup(10.6, is_stopping=False) == pytest.approx(0.6)


def test_the_next_due_time_is_not_asked_for_after_a_full_claim_nor_while_stopping():
    assert settled(limit=4, taken=4).due_lookup_at is None
    policy = ClaimPolicy(POLL)
    policy.claimed(4, 1, 10.0, is_stopping=True)
    assert policy.due_lookup_at is None


@pytest.mark.parametrize("what", ["woken", "stopping"])
def test_a_claim_called_for_or_a_stop_meanwhile_drops_the_question(what):
    policy = settled(10.0)
    if what == "woken":
        policy.woken()  # the claim it calls for asks again after it, if it takes all
    assert policy.take_due_lookup(10.0 + LOOKUP, is_stopping=what == "stopping") is None
    assert policy.due_lookup_at is None


def test_a_task_due_before_the_poll_is_claimed_at_its_time():
    policy = settled(10.0)
    policy.take_due_lookup(10.0 + LOOKUP, is_stopping=False)
    policy.due_in(0.3, 10.01)
    assert not policy.is_due(10.3) and policy.is_due(10.31)


def test_none_due_before_the_poll_leaves_the_poll():
    policy = settled(10.0)
    policy.due_in(None, 10.01)
    assert policy.next_due is None and not policy.is_due(10.5)


def test_a_claim_forgets_the_due_time_found_before_it():
    policy = settled(10.0)
    policy.due_in(0.3, 10.01)
    policy.began(10.1)
    policy.claimed(4, 4, 10.1, is_stopping=False)
    assert policy.next_due is None


# -- when the loop must be up for a claim -----------------------------------------------

def test_an_idle_daemon_wakes_for_the_poll_a_busy_or_stopping_one_does_not():
    policy = settled(10.0, limit=4, taken=4)  # nothing to ask for
    assert policy.wake_at(has_idle=True, has_room=True, is_stopping=False) == 10.0 + POLL
    assert policy.wake_at(has_idle=False, has_room=True, is_stopping=False) is None
    assert policy.wake_at(has_idle=True, has_room=False, is_stopping=True) is None


def test_the_loop_wakes_to_ask_for_the_next_due_time_then_at_it_when_it_has_room():
    policy = settled(10.0, limit=4, taken=1)
    assert policy.wake_at(has_idle=False, has_room=True, is_stopping=False) == 10.0 + LOOKUP
    policy.take_due_lookup(10.0 + LOOKUP, is_stopping=False)
    policy.due_in(0.3, 10.01)
    assert policy.wake_at(has_idle=True, has_room=True, is_stopping=False) == pytest.approx(10.31)
    assert policy.wake_at(has_idle=False, has_room=False, is_stopping=False) is None
