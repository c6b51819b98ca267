"""A worker process: runs the tasks its supervisor sends, one at a time, until told to stop.

It leads a process group of its own, which the processes its handler starts join.
Nothing in that group may outlive its supervisor: when the supervisor dies, however
it dies, Linux sends the worker SIGHUP (its parent-death signal), and the worker's
watchdog thread, woken at once through the signal's wakeup file descriptor, kills
every other process of the group and what they started, then ends the worker. The
signal is one the worker handles (not SIGKILL): a worker killed outright would leave
its handler's processes to init. A watchdog that sees the parent change catches the
rest, and while it runs a task the worker also ends itself and its group when the
daemon's lease runs out. A worker suspended by a pause gets SIGHUP and SIGCONT from
the kernel when its group is orphaned, and goes the same way. When an attempt ends,
whatever its handler started and left running is killed too.
"""

import ctypes
import logging
import os
import select
import signal
import threading
import time

import psutil

from atp.daemon import collector, handoff, suspension
from atp.daemon.execution import execute, has_expired
from atp.daemon.lease import clock
from atp.daemon.outage import close_connections
from atp.engine.outcomes import Outcome

logger = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
#: What Linux sends a worker when its supervisor dies.
PARENT_DEATH_SIGNAL = signal.SIGHUP
WATCHDOG_INTERVAL_SECONDS = 0.2
#: Exit codes a worker ends itself with, so the supervisor can tell why.
EXIT_PARENT_GONE = 70
EXIT_LEASE_ENDED = 71
EXIT_REASONS = {EXIT_PARENT_GONE: "its supervisor is gone", EXIT_LEASE_ENDED: "the daemon's lease ran out"}

_running = threading.Event()
#: The handlers this worker found, by path (``execution.execute``).
_resolved = {}


def worker_main(channel, lease_deadline, dropping, parent_pid, inherited_fds):
    """Run in the forked child: serve ``("run", ...)`` (``atp.daemon.handoff``: tasks with
    their attempt, handler and daemon) until ``("stop",)``, task after task, answering
    each with ``("done", pk, attempt, outcome values, at)`` (``handoff.done``; ``at``: this
    host's monotonic clock when it ended, when the next one starts), or, once ``dropping``
    is set (the daemon stops), with ``("dropped", pk, attempt)`` without running it.

    ``task`` is the ``Instance`` with its type and inputs: the worker writes nothing of
    its state, its supervisor does.
    """
    os.setpgid(0, 0)
    collector.for_worker()
    for fd in inherited_fds:
        try:
            os.close(fd)
        except OSError:
            pass
    # Ctrl-C reaches the whole process group; only the supervisor decides to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    suspension.install()
    signals = _signal_pipe()
    threading.Thread(
        target=_watchdog, args=(signals, lease_deadline, parent_pid), name="atp-watchdog",
        daemon=True,
    ).start()
    _die_with_parent(parent_pid)
    while True:
        try:
            message = channel.recv()
        except EOFError:  # the supervisor closed the channel: stop
            break
        except OSError:  # the supervisor is gone: so is this worker, and its group
            _end_group(EXIT_PARENT_GONE)
        if message[0] == "stop":
            break
        received = clock()
        for task, attempt, handler, daemon in handoff.unpack(message):
            try:
                handoff.send(channel, _run(task, attempt, handler, daemon, dropping,
                                           lease_deadline, received))
            except OSError:  # the supervisor is gone: so is this worker, and its group
                _end_group(EXIT_PARENT_GONE)
    close_connections()


def _run(task, attempt, handler, daemon, dropping, lease_deadline, received):
    """Run one task, unless the daemon stops or lost its lease, or the task expired (its
    claim came back to the supervisor at ``task.claimed_clock``, or it came to this worker
    ``received``, on ``clock``); return the answer to send."""
    if dropping.value or clock() > lease_deadline.value:
        return ("dropped", task.pk, attempt)
    claimed = getattr(task, "claimed_clock", None)
    if has_expired(task, clock() - (received if claimed is None else claimed)):
        return handoff.done(task.pk, attempt, Outcome.expired(task.pk, attempt), time.monotonic())
    _running.set()
    try:
        outcome = execute(task, attempt, handler, daemon, resolved=_resolved)
    finally:
        _running.clear()
        _end_attempt_processes()
    return handoff.done(task.pk, attempt, outcome, time.monotonic())


def _signal_pipe():
    """Return the read end of a pipe that gets a byte for each signal this process handles.

    The C-level signal handler writes it at once, whatever the main thread is doing
    (deep in a handler's C code, say), so the watchdog thread learns of the signal
    without waiting for Python to run the handler.
    """
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.signal(PARENT_DEATH_SIGNAL, lambda signum, frame: None)
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    return read


def _die_with_parent(parent_pid):
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, PARENT_DEATH_SIGNAL)
        # Orphans of what a handler started come to this worker, not to init.
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1)
    except (OSError, AttributeError):
        pass  # not Linux: the watchdog notices the parent's death instead
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        _end_group(EXIT_PARENT_GONE)


def _watchdog(signals, lease_deadline, parent_pid):
    while True:
        ready, _, _ = select.select([signals], [], [], WATCHDOG_INTERVAL_SECONDS)
        received = os.read(signals, 512) if ready else b""
        if PARENT_DEATH_SIGNAL in received or os.getppid() != parent_pid:
            _end_group(EXIT_PARENT_GONE)
        # An idle worker holds no task: only a running one must stop with the lease.
        if _running.is_set() and clock() > lease_deadline.value:
            _end_group(EXIT_LEASE_ENDED)


def _end_group(exit_code):
    """Kill every other process of this worker's group, and all they started, then end."""
    _kill_the_rest()
    os._exit(exit_code)


def _end_attempt_processes():
    """Kill what the attempt's handler started and left running: nothing outlives it.

    The worker is a child subreaper, so what its handler started stays its descendant
    even when orphaned. Most handlers start nothing: a look at this process's
    children files settles that without reading every process of the host.
    """
    if not _has_children():
        return
    try:
        descendants = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for process in descendants:
        try:
            process.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(descendants, timeout=1)  # reap them: they are ours


def _has_children():
    """Return whether this process has a child (a zombie counts), asking the kernel
    cheaply: one ``waitid`` that reaps nothing (about 1 µs; it sees the children of every
    thread of the process, and the orphans it adopted as a subreaper), else a byte of
    each of its threads' ``children`` files (16 µs a task with two threads)."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    except (AttributeError, OSError):  # no waitid here: read the children files
        return _has_children_in_proc()
    return True  # a child ended (left unreaped), or runs


_PROC_SCANS = 3  # listings of the threads before the slow way


def _has_children_in_proc():
    """Read a byte of each thread's ``children`` file. A thread that ends between the
    listing and its file (an at-fork hook's thread does) hands its children to another
    thread, perhaps one already read: then read them all again."""
    for _ in range(_PROC_SCANS):
        try:
            for thread in os.listdir("/proc/self/task"):
                fd = os.open(f"/proc/self/task/{thread}/children", os.O_RDONLY)
                try:
                    if os.read(fd, 1):
                        return True
                finally:
                    os.close(fd)
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended meanwhile
        except OSError:
            return True  # no such files here: look the slow way
        return False
    return True  # threads keep ending: look the slow way


def _kill_the_rest():
    """Kill every process of this worker's group and every descendant."""
    me = os.getpid()
    doomed = {}
    for process in psutil.process_iter():
        try:
            if process.pid != me and os.getpgid(process.pid) == me:
                doomed[process.pid] = process
        except (OSError, psutil.Error):
            continue
    try:
        # Descendants that left the group (setsid, setpgid) are still our children.
        doomed.update((child.pid, child) for child in psutil.Process(me).children(recursive=True))
    except psutil.Error:
        pass
    for process in doomed.values():
        try:
            process.kill()
        except psutil.Error:
            continue
