"""The supervisor's pool of long-lived worker processes.

The supervisor forks and watches its workers itself: a worker that dies is noticed
through its sentinel and replaced, and only the task it was running is affected
(``multiprocessing.Pool`` hangs when a worker is killed, and
``ProcessPoolExecutor`` fails every pending task when one child dies).

Each worker leads a process group of its own, which the processes its handler starts
join: signals go to the whole group, so stopping a task stops what it started, and a
worker's death takes any survivors of its group with it.
"""

import logging
import os
import signal
import time
from collections import deque

import psutil

from atp.daemon import handoff
from atp.daemon.worker import EXIT_REASONS, worker_main

logger = logging.getLogger(__name__)

STOP_JOIN_SECONDS = 5.0


def exit_cause(exitcode):
    """Return how a worker process ended, for the task's history."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    if exitcode in EXIT_REASONS:
        return EXIT_REASONS[exitcode]
    return f"exit code {exitcode}"


class Worker:
    """One worker process, its channel, and the tasks it was given: the one it runs (its
    ``assignment``) and those queued behind it, which it runs in order."""

    def __init__(self, process, channel, max_tasks=None):
        self.process = process
        self.channel = channel
        self.inbox = handoff.Inbox(channel)  # what it reports: read only through this
        self.queue = deque()  # Assignments, the running one first
        self.inflight = 0  # about how many bytes of its queue's tasks were sent to it
        self.max_tasks = max_tasks  # it is recycled after that many
        self.tasks_done = 0
        self.is_retiring = False
        self.is_suspended = False

    def __repr__(self):
        return f"<Worker pid={self.pid}>"

    @property
    def pid(self):
        return self.process.pid

    @property
    def assignment(self):
        """The task the worker runs (or will run next), or None."""
        return self.queue[0] if self.queue else None

    @property
    def queued(self):
        """The tasks waiting behind the one it runs."""
        return list(self.queue)[1:]

    @property
    def is_idle(self):
        return not self.queue and not self.is_retiring

    def free_slots(self, depth):
        """Return how many more tasks the worker may be given for a queue ``depth`` long:
        none behind a task that is paused or being stopped."""
        if self.is_retiring:
            return 0
        if self.queue and (self.is_suspended or self.queue[0].ending is not None):
            return 0
        room = depth - len(self.queue)
        if self.max_tasks:
            room = min(room, self.max_tasks - self.tasks_done - len(self.queue))
        return max(0, room)

    def assign(self, given):
        """Give the worker tasks to run, in order, after the ones it has: ``given`` holds
        ``(assignment, task)`` pairs, each task loaded with its type and inputs. One
        message for all, as plain values (``atp.daemon.handoff``: their types once)."""
        self.queue.extend(assignment for assignment, _ in given)
        self.inflight += sum(assignment.size for assignment, _ in given)
        handoff.send(self.channel, handoff.pack([
            (task, assignment.attempt, assignment.handler, str(assignment.daemon))
            for assignment, task in given
        ]))

    def finished(self):
        """Take the task the worker ran off its queue; return it."""
        assignment = self.queue.popleft()
        self.inflight -= assignment.size
        return assignment

    def retire(self):
        """Ask the worker to exit once it is idle (recycling)."""
        self.is_retiring = True
        try:
            self.channel.send(("stop",))
        except OSError:
            pass  # already gone: its sentinel tells the rest

    def memory_mb(self):
        try:
            return psutil.Process(self.pid).memory_info().rss / 2**20
        except psutil.Error:
            return 0.0

    def is_stopped(self):
        """Return whether the worker process is stopped (paused) right now."""
        try:
            return psutil.Process(self.pid).status() == psutil.STATUS_STOPPED
        except psutil.Error:
            return False

    def signal_group(self, signum):
        """Send ``signum`` to the worker's process group: the worker and what it started."""
        try:
            os.killpg(self.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass  # the group is empty: nothing left to signal
        if signum == signal.SIGTERM and self.is_suspended:
            self.resume()  # a stopped process acts on SIGTERM only once continued

    def suspend(self):
        """Pause the worker (it stops itself outside database writes) and what it started."""
        try:
            group = [p for p in psutil.Process(self.pid).children(recursive=True)
                     if os.getpgid(p.pid) == self.pid]
        except (psutil.Error, ProcessLookupError):
            group = []
        for child in group:
            try:
                child.suspend()
            except psutil.Error:
                pass
        try:
            os.kill(self.pid, signal.SIGTSTP)
        except ProcessLookupError:
            pass
        self.is_suspended = True

    def resume(self):
        try:
            os.killpg(self.pid, signal.SIGCONT)
        except (ProcessLookupError, PermissionError):
            pass
        self.is_suspended = False


class WorkerPool:
    """Forks workers, reads what they report, and notices when they die."""

    def __init__(self, context, lease, before_fork, private_fds=lambda: (), max_tasks=None):
        self.context = context
        self.max_tasks = max_tasks
        self.lease = lease
        # Set when the daemon stops: workers answer the tasks still queued for them
        # with ("dropped", ...) instead of running them.
        self.dropping = context.Value("b", 0, lock=False)
        self.before_fork = before_fork
        self.private_fds = private_fds
        self.workers = []

    def spawn(self, count):
        """Start ``count`` new workers (closing the supervisor's connections first)."""
        if count <= 0:
            return
        self.before_fork()
        for _ in range(count):
            parent_end, child_end = self.context.Pipe(duplex=True)
            # The child closes what it inherits but must not use: the other workers'
            # channels and the supervisor's own descriptors.
            inherited = [fd for w in self.workers for fd in (w.channel.fileno(), w.inbox.fileno())]
            inherited += [parent_end.fileno(), *self.private_fds()]
            process = self.context.Process(
                target=worker_main, name="atpd-worker", daemon=False,
                args=(child_end, self.lease.deadline, self.dropping, os.getpid(), inherited),
            )
            process.start()
            try:
                os.setpgid(process.pid, process.pid)  # the child does it too; whoever is first
            except (PermissionError, ProcessLookupError):
                pass
            child_end.close()
            self.workers.append(Worker(process, parent_end, self.max_tasks))
            logger.debug("worker pid=%s started", process.pid)

    def waitables(self):
        """Return what ``multiprocessing.connection.wait`` should watch."""
        return [w.channel for w in self.workers] + [w.process.sentinel for w in self.workers]

    def idle(self):
        return [worker for worker in self.workers if worker.is_idle]

    def busy(self):
        return [worker for worker in self.workers if worker.queue]

    def drop_queued(self):
        """Have the workers hand back, unrun, the tasks queued behind their running ones."""
        self.dropping.value = 1

    def messages(self):
        """Yield ``(worker, message)`` for every message waiting from a worker."""
        for worker in list(self.workers):
            try:
                messages = worker.inbox.take()
            except (EOFError, OSError):
                continue  # the worker died; collect_dead reports it
            for message in messages:
                yield worker, message

    def dead(self):
        """Return the workers that have exited. Read their messages before collecting
        them: a worker's last answers may be waiting in its channel."""
        return [worker for worker in self.workers if not worker.process.is_alive()]

    def collect_dead(self, dead=None):
        """Remove the workers that exited (``dead``, by default those of now), killing what
        is left of their groups; return them."""
        dead = self.dead() if dead is None else dead
        for worker in dead:
            worker.process.join()
            worker.channel.close()
            worker.inbox.close()
            worker.signal_group(signal.SIGKILL)
            self.workers.remove(worker)
        return dead

    def stop_all(self, timeout=STOP_JOIN_SECONDS):
        """Ask idle workers to exit, wait up to ``timeout``, then kill what is left."""
        for worker in self.workers:
            if worker.assignment is None:
                worker.retire()
        deadline = time.monotonic() + timeout
        for worker in self.workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
        for worker in self.workers:
            if worker.process.is_alive():
                worker.signal_group(signal.SIGKILL)
                worker.process.join()
