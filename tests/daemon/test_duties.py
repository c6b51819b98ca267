"""The maintenance duties' scheduler (``atp.daemon.duties``) with duties that note their
runs, on a clock the test moves; and the supervisor's table of them."""

import logging

import pytest
from django.db import OperationalError
from django.test import override_settings

from atp.daemon.config import DaemonConfig
from atp.daemon.duties import Duties, Duty

PART_BEFORE, PART_AFTER = False, True


class Clock:
    def __init__(self, now=0.0):
        self.now = now

    def __call__(self):
        return self.now


def table(*rows, clock=None):
    """Return ``Duties`` running ``rows``, and the list each run of a duty is noted in."""
    runs = []

    def noting(name, result=None):
        def run():
            runs.append(name)
            if isinstance(result, Exception):
                raise result
            return result
        return run

    duties = [Duty(name, interval, noting(name, result), **options)
              for name, interval, result, options in rows]
    return Duties(duties, clock=clock or Clock()), runs


def row(name, interval=5.0, result=None, **options):
    return (name, interval, result, options)


def test_duties_run_at_once_in_the_tables_order_then_every_interval_from_the_round():
    duties, runs = table(row("reap", 5.0), row("schedules", 1.0))
    duties.run_due(10.0, is_stopping=False)
    assert runs == ["reap", "schedules"]
    duties.run_due(10.9, is_stopping=False)
    assert runs == ["reap", "schedules"]
    duties.run_due(11.0, is_stopping=False)
    assert runs == ["reap", "schedules", "schedules"]
    assert duties.next_due(is_stopping=False) == 12.0


def test_a_paced_duty_comes_again_as_soon_as_it_says_counted_from_its_end():
    clock = Clock()
    duties, runs = table(row("purge", 5.0, 0.05, is_paced=True), clock=clock)
    clock.now = 10.2  # the purge took 0.2 s of the round begun at 10.0
    duties.run_due(10.0, is_stopping=False)
    assert duties.next_due(is_stopping=False) == pytest.approx(10.25)


@pytest.mark.parametrize("result", [None, 60.0])
def test_a_paced_duty_comes_again_no_later_than_its_interval(result):
    duties, _ = table(row("schedules", 1.0, result, is_paced=True), clock=Clock(10.0))
    duties.run_due(10.0, is_stopping=False)
    assert duties.next_due(is_stopping=False) == 11.0


def test_a_duty_after_the_claim_runs_only_in_the_rounds_second_part():
    duties, runs = table(row("reap"), row("purge", after_claim=True))
    duties.run_due(10.0, is_stopping=False, after_claim=PART_BEFORE)
    assert runs == ["reap"]
    duties.run_due(10.0, is_stopping=False, after_claim=PART_AFTER)
    assert runs == ["reap", "purge"]


def test_a_daemon_that_stops_does_only_the_duties_marked_for_it():
    duties, runs = table(row("reap", 5.0), row("schedules", 1.0, while_stopping=False))
    duties.run_due(10.0, is_stopping=True)
    assert runs == ["reap"]
    assert duties.next_due(is_stopping=True) == 15.0
    assert duties.next_due(is_stopping=False) == 0.0  # the schedules wait, due
    duties.run_due(10.5, is_stopping=False)
    assert runs == ["reap", "schedules"]


def test_a_duty_that_fails_is_logged_and_tried_at_its_next_turn_the_others_run(caplog):
    duties, runs = table(row("tending batches", 5.0, ValueError("refused")), row("prune"))
    with caplog.at_level(logging.ERROR):
        duties.run_due(10.0, is_stopping=False)
    assert runs == ["tending batches", "prune"]
    assert [r.getMessage() for r in caplog.records] == ["tending batches failed"]
    duties.run_due(14.9, is_stopping=False)
    assert runs == ["tending batches", "prune"]
    duties.run_due(15.0, is_stopping=False)
    assert runs == ["tending batches", "prune", "tending batches", "prune"]


def test_a_failure_of_the_daemons_own_duty_ends_the_daemon():
    duties, runs = table(row("taking on new types", result=ValueError("bug"),
                             is_contained=False), row("prune"))
    with pytest.raises(ValueError):
        duties.run_due(10.0, is_stopping=False)
    assert runs == ["taking on new types"]


def test_a_lost_connection_leaves_the_duty_and_those_after_it_due():
    duties, runs = table(row("reap"), row("expire", result=OperationalError("gone")),
                         row("prune"))
    with pytest.raises(OperationalError):
        duties.run_due(10.0, is_stopping=False)
    assert runs == ["reap", "expire"]
    assert duties.next_due(is_stopping=False) == 0.0  # still due
    duties.duties[1].run = lambda: runs.append("expire")  # the database is back
    duties.run_due(10.5, is_stopping=False)
    assert runs == ["reap", "expire", "expire", "prune"]


def test_the_supervisors_duties_keep_the_intervals_of_their_settings():
    from atp.daemon.supervisor import Supervisor

    with override_settings(ATP_HEARTBEAT_INTERVAL_SECONDS=3, ATP_POLL_INTERVAL_SECONDS=0.5):
        duties = Supervisor(DaemonConfig(workers=1)).duties.duties
    assert [(duty.what, duty.interval) for duty in duties] == [
        ("taking on new types", 3), ("reaping silent daemons", 3),
        ("expiring pull leases", 3), ("cancelling expired tasks", 3), ("tending batches", 3),
        ("pruning stopped daemons", 3), ("tending the queue table", 3),
        ("enqueueing what came due", 0.5), ("purging ended tasks and tombstones", 3),
    ]
    assert [duty.what for duty in duties if duty.after_claim or not duty.while_stopping] == [
        "enqueueing what came due", "purging ended tasks and tombstones"]
