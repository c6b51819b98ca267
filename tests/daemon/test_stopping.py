"""Every branch of the stopping decisions, against fake workers: no database, no daemon."""

import signal

import pytest

from atp.daemon.stopping import (
    LEASE_RAN_OUT,
    SHUTDOWN_TIMEOUT_REACHED,
    TAKEN_BECAUSE,
    Action,
    Assignment,
    Decision,
    Ending,
    Observation,
    Stopper,
    decide,
    due,
    unwritten_start,
    write_after,
)
from atp.states import Status

ATTEMPT = 2


def assignment(pk=1, attempt=ATTEMPT, timeout=60.0, **changes):
    made = Assignment(pk, attempt, "tests.noop", "tests.handlers.noop", timeout, "host:1")
    for name, value in changes.items():
        setattr(made, name, value)
    return made


class FakeWorker:
    """What the decisions read of a worker, and what the stopper does to it."""

    def __init__(self, assignment, *, stopped=False, suspended=False):
        self.assignment = assignment
        self.stopped = stopped
        self.is_suspended = suspended
        self.signals = []
        self.calls = []

    def __repr__(self):
        return f"<FakeWorker {self.assignment.pk}>"

    def is_stopped(self):
        return self.stopped

    def signal_group(self, signum):
        self.signals.append(signum)

    def suspend(self):
        self.calls.append("suspend")

    def resume(self):
        self.calls.append("resume")


def observed(leases=None, states=None):
    return Observation(leases or {}, states or {})


def leased(status=Status.RUNNING, attempt=ATTEMPT, overdue=False):
    return (status, attempt, overdue)


# -- decide: leases no worker runs ------------------------------------------------------

@pytest.mark.parametrize("status", [Status.SCHEDULED, Status.RUNNING, Status.PAUSED])
def test_a_lease_no_worker_runs_of_a_task_in_flight_is_handed_back(status):
    assert decide(observed({7: leased(status)}), []) == [Decision(
        Action.HAND_BACK, pk=7, attempt=ATTEMPT, reason="its daemon had lost track of it")]


@pytest.mark.parametrize("status", [Status.ACCEPTED, Status.CANCELLED, Status.FINISHED,
                                    Status.FAILED])
def test_a_lease_no_worker_runs_of_a_task_an_operator_took_is_released(status):
    [decision] = decide(observed({7: leased(status)}), [])
    assert (decision.action, decision.pk) == (Action.RELEASE, 7)


# -- decide: a worker's leased task ---------------------------------------------------------

def test_a_task_running_as_told_needs_nothing():
    worker = FakeWorker(assignment())
    assert decide(observed({1: leased()}), [worker]) == []


def test_a_newer_attempt_supersedes_the_worker():
    worker = FakeWorker(assignment())
    assert decide(observed({1: leased(attempt=ATTEMPT + 1)}), [worker]) == [Decision(
        Action.STOP, worker, Ending.SUPERSEDED, f"attempt {ATTEMPT + 1} replaced it")]


@pytest.mark.parametrize("status", list(TAKEN_BECAUSE))
def test_a_task_an_operator_took_stops_the_worker(status):
    worker = FakeWorker(assignment())
    assert decide(observed({1: leased(status)}), [worker]) == [
        Decision(Action.STOP, worker, Ending.TAKEN, TAKEN_BECAUSE[status])]


@pytest.mark.parametrize("status", [Status.SCHEDULED, Status.RUNNING])
def test_an_overdue_task_times_out(status):
    worker = FakeWorker(assignment(timeout=1.5))
    assert decide(observed({1: leased(status, overdue=True)}), [worker]) == [
        Decision(Action.STOP, worker, Ending.TIME_OUT, "time-out after 1.5 s")]


def test_a_paused_task_suspends_its_worker_until_it_is_stopped():
    running = FakeWorker(assignment())
    assert decide(observed({1: leased(Status.PAUSED)}), [running]) == [
        Decision(Action.SUSPEND, running)]
    suspended = FakeWorker(assignment(), stopped=True, suspended=True)
    assert decide(observed({1: leased(Status.PAUSED)}), [suspended]) == []


@pytest.mark.parametrize("stopped, suspended", [(True, True), (True, False), (False, True)],
                         ids=["suspended", "stopped-by-someone", "told-but-not-yet"])
def test_a_resumed_task_resumes_its_worker(stopped, suspended):
    worker = FakeWorker(assignment(), stopped=stopped, suspended=suspended)
    assert decide(observed({1: leased(Status.RUNNING)}), [worker]) == [
        Decision(Action.RESUME, worker)]


def test_a_worker_being_stopped_is_left_to_its_stop():
    worker = FakeWorker(assignment(ending=Ending.TIME_OUT))
    assert decide(observed({1: leased(Status.CANCELLED, overdue=True)}), [worker]) == []
    assert decide(observed(), [worker]) == []


# -- decide: a worker's task that lost its lease ---------------------------------------------

def test_a_deleted_task_stops_its_worker():
    worker = FakeWorker(assignment())
    assert decide(observed(), [worker]) == [
        Decision(Action.STOP, worker, Ending.GONE, "the task was deleted")]


@pytest.mark.parametrize("state", [(Status.ACCEPTED, ATTEMPT), (Status.RUNNING, ATTEMPT + 1),
                                   (Status.FINISHED, ATTEMPT)])
def test_a_task_that_went_on_without_its_worker_stops_it(state):
    worker = FakeWorker(assignment())
    assert decide(observed(states={1: state}), [worker]) == [
        Decision(Action.STOP, worker, Ending.SUPERSEDED, "the task went on without it")]


def test_each_worker_gets_its_own_decision():
    ok, late, gone = (FakeWorker(assignment(pk)) for pk in (1, 2, 3))
    decisions = decide(observed({1: leased(), 2: leased(overdue=True), 9: leased()}),
                       [ok, late, gone])
    assert [(d.action, d.worker, d.pk) for d in decisions] == [
        (Action.HAND_BACK, None, 9), (Action.STOP, late, None), (Action.STOP, gone, None)]


# -- due: the clocks ------------------------------------------------------------------------

def test_nothing_is_due_before_its_time():
    worker = FakeWorker(assignment(kill_at=10.0))
    assert due([worker], 9.9, drain_deadline=10.0) == []


def test_a_grace_that_is_over_kills():
    worker = FakeWorker(assignment(kill_at=10.0, ending=Ending.TIME_OUT))
    assert due([worker], 10.0) == [Decision(Action.KILL, worker)]


def test_the_shutdown_timeout_stops_what_still_runs():
    worker = FakeWorker(assignment())
    assert due([worker], 20.0, drain_deadline=20.0) == [
        Decision(Action.STOP, worker, Ending.SHUTDOWN, SHUTDOWN_TIMEOUT_REACHED)]


def test_a_lost_lease_kills_at_once_even_while_draining():
    worker = FakeWorker(assignment())
    assert due([worker], 20.0, drain_deadline=10.0, lease_expired=True) == [
        Decision(Action.STOP, worker, Ending.LEASE_LOST, LEASE_RAN_OUT, kill=True)]


# -- the stopper ----------------------------------------------------------------------------

def test_a_stop_sends_sigterm_then_the_grace_then_sigkill(settings):
    settings.ATP_WORKER_KILL_GRACE_SECONDS = 5
    worker = FakeWorker(assignment())
    stopper = Stopper()
    stopper.apply([Decision(Action.STOP, worker, Ending.TIME_OUT, "time-out after 60 s")], None)
    assert worker.signals == [signal.SIGTERM]
    assert worker.assignment.kill_at is not None
    # Stopped again (the shutdown timeout, say): the first reason stays, no second SIGTERM.
    stopper.end(worker, Ending.SHUTDOWN, "later")
    assert (worker.assignment.ending, worker.assignment.reason) == (
        Ending.TIME_OUT, "time-out after 60 s")
    assert worker.signals == [signal.SIGTERM]
    stopper.apply(due([worker], worker.assignment.kill_at), None)
    assert worker.signals == [signal.SIGTERM, signal.SIGKILL]
    assert worker.assignment.is_killed and worker.assignment.kill_at is None
    stopper.end(worker, Ending.LEASE_LOST, "lease", kill=True)
    assert worker.signals == [signal.SIGTERM, signal.SIGKILL], "killed once"


def test_a_stop_with_kill_skips_the_grace():
    worker = FakeWorker(assignment())
    Stopper().apply(due([worker], 0.0, lease_expired=True), None)
    assert worker.signals == [signal.SIGKILL]
    assert worker.assignment.ending == Ending.LEASE_LOST


def test_suspend_and_resume_reach_the_worker():
    worker = FakeWorker(assignment())
    Stopper().apply([Decision(Action.SUSPEND, worker), Decision(Action.RESUME, worker)], None)
    assert worker.calls == ["suspend", "resume"]


# -- what is written afterwards ---------------------------------------------------------------

@pytest.mark.parametrize("ending, what", [
    (None, "restart"), (Ending.TIME_OUT, "restart"), (Ending.LEASE_LOST, "restart"),
    (Ending.SHUTDOWN, "hand back"), (Ending.TAKEN, "let go of"),
    (Ending.SUPERSEDED, None), (Ending.GONE, None),
])
def test_what_a_dead_workers_task_needs_written(ending, what):
    written = write_after(assignment(ending=ending), "signal SIGKILL")
    if what is None:
        assert written is None
    else:
        assert written[0] == f"{what} task id=1"


@pytest.mark.parametrize("ending, written", [
    (None, True), (Ending.TIME_OUT, True), (Ending.SHUTDOWN, True),
    (Ending.SUPERSEDED, False), (Ending.GONE, False),
])
def test_a_prefetched_attempt_that_began_keeps_its_start_when_its_worker_dies(ending, written):
    assert unwritten_start(assignment(ending=ending)) is None  # its start is written
    start = unwritten_start(assignment(ending=ending, start_written=False))
    assert (start is not None) == written
    if written:
        assert start[0] == "start of task id=1"


@pytest.mark.django_db
def test_the_start_is_written_before_the_restart_dated_when_it_began(noop_type, daemon):
    import time

    from atp import engine
    from atp.models import Instance, LogRecord
    from tests.factories import claim_exactly

    queued = engine.enqueue("tests.noop")
    claim_exactly(queued, daemon)  # prefetched: SCHEDULED
    began = assignment(pk=queued.pk, attempt=1, daemon=daemon, start_written=False,
                       since=time.monotonic() - 2)
    for _, write in (unwritten_start(began), write_after(began, "signal SIGKILL")):
        write()
    history = list(LogRecord.objects.filter(instance_id=queued.pk).values_list("status", "time"))
    assert [status for status, _ in history] == [
        Status.ACCEPTED, Status.SCHEDULED, Status.RUNNING, Status.ACCEPTED]
    claimed_at, started_at, restarted_at = (time for _, time in history[1:])
    # It began 2 s ago by the worker's clock, which is before its claim: dated at the claim.
    assert claimed_at == started_at <= restarted_at
    assert Instance.objects.get(pk=queued.pk).restarts == 1
