"""Stopping a worker's task: when, how, and what to write once it has stopped.

A task a worker runs must stop when its rows say so (an operator cancelled, ended,
re-enqueued or paused it, another attempt replaced it, it was deleted, its time-out
passed), when the daemon stops, and when the daemon lost its lease. All of it is
here, in three parts:

- deciding, without side effects: ``decide`` turns what ``observe`` read of the
  daemon's leases and what the workers run into ``Decision`` s; ``due`` does the same
  for the clocks (the kill grace, the shutdown timeout, the lease). Both are pure
  functions of their arguments, tested against a fake pool;
- doing: ``Stopper`` carries decisions out (SIGTERM, SIGKILL once the grace is over,
  suspend, resume, and the writes a lease no worker runs needs);
- afterwards: ``write_after`` says what to write once a stopped (or dead) worker is
  gone, and ``PendingWrites`` keeps those writes, in order, through a database outage.
"""

import enum
import logging
import signal
import time
from dataclasses import dataclass, field

from atp import engine
from atp.conf import conf
from atp.daemon.outage import CONNECTION_ERRORS, TASK_MOVED_ON
from atp.daemon.recording import settle
from atp.engine.daemons import leases_of, task_states
from atp.engine.outcomes import Outcome
from atp.states import IN_FLIGHT, Status

logger = logging.getLogger(__name__)

TAKEN_BECAUSE = {
    Status.ACCEPTED: "the task was re-enqueued",
    Status.CANCELLED: "the task was cancelled",
    Status.FAILED: "an operator marked the task FAILED",
    Status.FINISHED: "an operator marked the task FINISHED",
}
SHUTDOWN_TIMEOUT_REACHED = "daemon stopping: shutdown timeout reached"
LEASE_RAN_OUT = "daemon lost its lease: no heartbeat got through in time"


class Ending(enum.Enum):
    """Why the supervisor stops a worker's task, which decides what it writes afterwards."""

    TIME_OUT = "time-out"  # restart the task, spending a restart
    LEASE_LOST = "lease lost"  # restart the task, spending a restart
    SHUTDOWN = "shutdown"  # hand the task back, no restart spent
    TAKEN = "taken"  # an operator took the task: let go of it
    SUPERSEDED = "superseded"  # another attempt owns the task: nothing to write
    GONE = "gone"  # the task was deleted: nothing to write


@dataclass
class Assignment:
    """A task a worker was given, by which daemon, and once stopped, why."""

    pk: int
    attempt: int
    type: str
    handler: str
    timeout_seconds: float
    daemon: object
    ending: Ending = None
    reason: str = ""
    kill_at: float = None
    is_killed: bool = False
    since: float = field(default_factory=time.monotonic)  # when it started, or was sent
    start_written: bool = True  # False for a prefetched task until its start is written
    size: int = 0  # about how many bytes it took in its worker's pipe

    def follow(self, previous):
        """Take over the stop of ``previous``, the task before it on a worker being stopped:
        the worker dies of it, and this task, which may have just begun, goes back to
        the queue with it, no restart spent."""
        if previous.ending is None or self.ending is not None:
            return
        self.ending = Ending.SHUTDOWN
        self.reason = (f"handed back: its worker was being stopped for task id={previous.pk} "
                       f"({previous.reason})")
        self.kill_at, self.is_killed = previous.kill_at, previous.is_killed


class Action(enum.Enum):
    STOP = "stop"  # stop the worker's task with an Ending (SIGTERM, SIGKILL after the grace)
    KILL = "kill"  # the grace is over: SIGKILL
    SUSPEND = "suspend"
    RESUME = "resume"
    HAND_BACK = "hand back"  # a lease no worker runs, task in flight: back to the queue
    RELEASE = "release"  # a lease no worker runs, task taken by an operator: let go


@dataclass(frozen=True)
class Decision:
    """What to do about one worker, or about one lease no worker runs."""

    action: Action
    worker: object = None
    ending: Ending = None
    reason: str = ""
    kill: bool = False  # STOP with SIGKILL at once, no grace
    pk: int = None
    attempt: int = None


@dataclass(frozen=True)
class Observation:
    """What the database says of a daemon's tasks: ``leases`` maps each task it holds to
    ``(status, attempt, overdue)``; ``states`` maps each task a worker runs that it
    holds no lease on to ``(status, attempt)`` (absent: the task is gone)."""

    leases: dict
    states: dict


# -- deciding ------------------------------------------------------------------------

def observe(workers, daemon):
    """Read ``daemon``'s leases, and the state of the tasks ``workers`` run unleased.

    One query; a second one only when a worker runs a task the daemon no longer holds.
    """
    leases = leases_of(daemon)
    unleased = [worker.assignment.pk for worker in _active(workers)
                if worker.assignment.pk not in leases]
    return Observation(leases, task_states(unleased))


def decide(observation, workers, queued=()):
    """Return the decisions that bring ``workers`` (the busy ones) in step with
    ``observation``; a worker already being stopped is left to its stop. ``queued``
    holds the keys of tasks queued behind the workers' running ones: each is seen to
    when its worker reaches it."""
    running = {worker.assignment.pk for worker in workers} | set(queued)
    decisions = [
        Decision(Action.HAND_BACK if status in IN_FLIGHT else Action.RELEASE,
                 pk=pk, attempt=attempt, reason="its daemon had lost track of it")
        for pk, (status, attempt, _) in observation.leases.items() if pk not in running
    ]
    for worker in _active(workers):
        pk = worker.assignment.pk
        if pk in observation.leases:
            decision = _leased(worker, *observation.leases[pk])
        else:
            decision = _unleased(worker, observation.states.get(pk))
        if decision is not None:
            decisions.append(decision)
    return decisions


def _active(workers):
    return [worker for worker in workers if worker.assignment.ending is None]


def _leased(worker, status, attempt, overdue):
    assignment = worker.assignment
    if attempt != assignment.attempt:
        return Decision(Action.STOP, worker, Ending.SUPERSEDED, f"attempt {attempt} replaced it")
    if status not in IN_FLIGHT:
        return Decision(Action.STOP, worker, Ending.TAKEN, TAKEN_BECAUSE[status])
    if overdue:
        return Decision(Action.STOP, worker, Ending.TIME_OUT,
                        f"time-out after {assignment.timeout_seconds:g} s")
    # What the worker is, not what it was told: a pause asked for between tasks, or
    # before the handler began, did not take, and is asked again.
    if status == Status.PAUSED and not worker.is_stopped():
        return Decision(Action.SUSPEND, worker)
    if status != Status.PAUSED and (worker.is_suspended or worker.is_stopped()):
        return Decision(Action.RESUME, worker)
    return None


def _unleased(worker, state):
    # The daemon's own ends are written only once their worker reported them: a task
    # a worker still runs that lost its lease went on without it, or was deleted.
    if state is None:
        return Decision(Action.STOP, worker, Ending.GONE, "the task was deleted")
    return Decision(Action.STOP, worker, Ending.SUPERSEDED, "the task went on without it")


def due(workers, now, *, drain_deadline=None, lease_expired=False):
    """Return the decisions the clocks call for at ``now`` about the busy ``workers``: a
    kill grace that is over, the shutdown timeout reached, the daemon's lease lost."""
    decisions = []
    for worker in workers:
        assignment = worker.assignment
        if assignment.kill_at is not None and now >= assignment.kill_at:
            decisions.append(Decision(Action.KILL, worker))
        elif lease_expired:
            decisions.append(Decision(Action.STOP, worker, Ending.LEASE_LOST, LEASE_RAN_OUT,
                                      kill=True))
        elif drain_deadline is not None and now >= drain_deadline:
            decisions.append(Decision(Action.STOP, worker, Ending.SHUTDOWN,
                                      SHUTDOWN_TIMEOUT_REACHED))
    return decisions


# -- doing ---------------------------------------------------------------------------

class Stopper:
    """Carries out decisions about workers for one daemon."""

    def end(self, worker, ending, reason, *, kill=False):
        """Stop the task a worker runs: SIGTERM, then SIGKILL after the grace (at once if
        ``kill``). The first reason given is the one kept."""
        assignment = worker.assignment
        if assignment.ending is None:
            assignment.ending, assignment.reason = ending, reason
            logger.info("task id=%s attempt=%s stopped: %s", assignment.pk, assignment.attempt,
                        reason)
        if assignment.is_killed:
            return
        if kill:
            self.kill(worker)
        elif assignment.kill_at is None:
            worker.signal_group(signal.SIGTERM)
            assignment.kill_at = time.monotonic() + conf.WORKER_KILL_GRACE_SECONDS

    @staticmethod
    def kill(worker):
        worker.signal_group(signal.SIGKILL)
        worker.assignment.is_killed = True
        worker.assignment.kill_at = None

    def apply(self, decisions, daemon):
        """Carry out ``decisions`` for ``daemon``.

        A decision about a task that moved on meanwhile is skipped; one failing otherwise
        is logged, and the others are still carried out. Connection errors are raised.
        """
        for decision in decisions:
            try:
                self._apply(decision, daemon)
            except CONNECTION_ERRORS:
                raise
            except TASK_MOVED_ON as exc:
                logger.info("%s of task id=%s skipped: %s", decision.action.value, decision.pk,
                            exc)
            except Exception:
                logger.exception("%s of task id=%s failed", decision.action.value, decision.pk)

    def _apply(self, decision, daemon):
        action, worker = decision.action, decision.worker
        if action == Action.STOP:
            self.end(worker, decision.ending, decision.reason, kill=decision.kill)
        elif action == Action.KILL:
            self.kill(worker)
        elif action == Action.SUSPEND:
            worker.suspend()
        elif action == Action.RESUME:
            worker.resume()
        elif action == Action.HAND_BACK:
            engine.hand_back(decision.pk, decision.reason, attempt=decision.attempt,
                             daemon=daemon)
        elif action == Action.RELEASE:
            engine.release(decision.pk, daemon=daemon)


# -- afterwards ----------------------------------------------------------------------

def write_after(assignment, cause):
    """Return ``(description, write)`` to apply once the worker of ``assignment`` is dead.

    Return None when there is nothing to write: the task went on elsewhere. ``cause``
    says how the worker ended, for a worker that died on its own.
    """
    pk, attempt, daemon = assignment.pk, assignment.attempt, assignment.daemon
    ending, reason = assignment.ending, assignment.reason
    if ending in (Ending.SUPERSEDED, Ending.GONE):
        return None
    if ending == Ending.SHUTDOWN:
        return f"hand back task id={pk}", lambda: engine.hand_back(
            pk, reason, attempt=attempt, daemon=daemon)
    if ending == Ending.TAKEN:
        return f"let go of task id={pk}", lambda: engine.release(pk, daemon=daemon)
    if ending is None:
        reason = f"worker died: {cause}"
    return f"restart task id={pk}", lambda: engine.restart(
        pk, reason, attempt=attempt, daemon=daemon)


def unwritten_start(assignment):
    """Return ``(description, write)`` writing the start of a prefetched attempt that began
    but whose start the next round had not written yet, or None: its worker died or was
    stopped first. Done before the restart or hand-back, it keeps the attempt's RUNNING
    entry in the history (dated when the attempt began)."""
    if assignment.start_written or assignment.ending in (Ending.SUPERSEDED, Ending.GONE):
        return None
    pk, attempt, daemon, since = (assignment.pk, assignment.attempt, assignment.daemon,
                                  assignment.since)
    return f"start of task id={pk}", lambda: settle(
        daemon, [Outcome.started(pk, attempt, time.monotonic() - since)])


def hand_back_unstarted(assignment, why):
    """Return ``(description, write)`` handing back a task queued behind a worker's running
    one, never started (the worker died or the daemon stops first): no restart spent."""
    pk, attempt, daemon = assignment.pk, assignment.attempt, assignment.daemon
    reason = f"handed back before it started: {why}"
    return f"hand back task id={pk}", lambda: engine.hand_back(
        pk, reason, attempt=attempt, daemon=daemon)


class PendingWrites:
    """Writes waiting for the database, done in order and kept through an outage."""

    def __init__(self):
        self._writes = []

    def __len__(self):
        return len(self._writes)

    def add(self, description, write):
        self._writes.append((description, write))

    def flush(self):
        """Do the waiting writes; raise a connection error, keeping the rest for later.

        A write refused because its task moved on is skipped; one failing otherwise is
        logged and given up, so that one bad write cannot block the others forever.
        """
        while self._writes:
            description, write = self._writes[0]
            try:
                write()
            except CONNECTION_ERRORS:
                raise
            except TASK_MOVED_ON as exc:
                logger.info("%s skipped: %s", description, exc)
            except Exception:
                logger.exception("%s failed and is given up", description)
            self._writes.pop(0)
