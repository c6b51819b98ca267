import itertools

import pytest

from atp.exceptions import InvalidTransition
from atp.states import (
    IN_FLIGHT,
    LIVE,
    TERMINAL,
    TRANSITIONS,
    Status,
    check_transition,
    is_allowed,
    sources_of,
)


def test_every_state_is_live_or_terminal_and_has_a_row_in_the_table():
    assert set(LIVE) | set(TERMINAL) == set(Status)
    assert not set(LIVE) & set(TERMINAL)
    assert set(TRANSITIONS) == set(Status)
    assert set(IN_FLIGHT) == set(LIVE) - {Status.ACCEPTED}


def test_a_finished_task_never_changes_again():
    assert TRANSITIONS[Status.FINISHED] == frozenset()
    for target in Status:
        with pytest.raises(InvalidTransition, match="already FINISHED"):
            check_transition(Status.FINISHED, target, task="#1")


def test_only_an_accepted_task_can_be_scheduled():
    assert sources_of(Status.SCHEDULED) == {Status.ACCEPTED}


def test_the_rfc_path_and_its_detours_are_allowed():
    path = [Status.ACCEPTED, Status.SCHEDULED, Status.RUNNING, Status.PAUSED,
            Status.RUNNING, Status.FINISHED]
    for current, target in itertools.pairwise(path):
        assert is_allowed(current, target)
    for state in IN_FLIGHT:  # stale or timed-out tasks go back, or fail at the limit
        assert is_allowed(state, Status.ACCEPTED)
        assert is_allowed(state, Status.FAILED)
    for state in LIVE:
        assert is_allowed(state, Status.CANCELLED)


def test_a_refusal_names_the_states_involved():
    with pytest.raises(InvalidTransition) as refused:
        check_transition(Status.ACCEPTED, Status.RUNNING, task="#7")
    assert str(refused.value) == "cannot move task #7 from ACCEPTED to RUNNING"
    assert (refused.value.current, refused.value.target) == (Status.ACCEPTED, Status.RUNNING)
