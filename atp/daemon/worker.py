"""A worker process: runs the tasks its supervisor sends, one at a time, until told to stop.

It leads a process group of its own, which the processes its handler starts join. It
dies with its supervisor (Linux's parent-death signal, and a watchdog thread that
notices a parent that is gone and takes the whole group down), and while it runs a
task it ends itself and its group when the daemon's lease runs out.
"""

import ctypes
import logging
import os
import signal
import threading
import time

import psutil

from atp.daemon import suspension
from atp.daemon.execution import run_task
from atp.daemon.lease import clock
from atp.daemon.outage import close_connections

logger = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
WATCHDOG_INTERVAL_SECONDS = 0.2
#: Exit codes a worker ends itself with, so the supervisor can tell why.
EXIT_PARENT_GONE = 70
EXIT_LEASE_ENDED = 71
EXIT_REASONS = {EXIT_PARENT_GONE: "its supervisor is gone", EXIT_LEASE_ENDED: "the daemon's lease ran out"}

_running = threading.Event()


def worker_main(channel, lease_deadline, parent_pid, inherited_fds):
    """Run in the forked child: serve ``("run", pk, attempt, handler, daemon)`` until ``("stop",)``."""
    os.setpgid(0, 0)
    _die_with_parent(parent_pid)
    for fd in inherited_fds:
        try:
            os.close(fd)
        except OSError:
            pass
    # Ctrl-C reaches the whole process group; only the supervisor decides to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    suspension.install()
    threading.Thread(
        target=_watchdog, args=(lease_deadline, parent_pid), name="atp-watchdog", daemon=True
    ).start()
    while True:
        try:
            message = channel.recv()
        except EOFError:
            break
        if message[0] == "stop":
            break
        _, pk, attempt, handler, daemon = message
        _running.set()
        try:
            run_task(pk, attempt, handler, daemon)
        finally:
            _running.clear()
        channel.send(("done", pk, attempt))
    close_connections()


def _die_with_parent(parent_pid):
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: the watchdog notices the parent's death instead
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(EXIT_PARENT_GONE)


def _watchdog(lease_deadline, parent_pid):
    while True:
        time.sleep(WATCHDOG_INTERVAL_SECONDS)
        if os.getppid() != parent_pid:
            _end_group(EXIT_PARENT_GONE)
        # An idle worker holds no task: only a running one must stop with the lease.
        if _running.is_set() and clock() > lease_deadline.value:
            _end_group(EXIT_LEASE_ENDED)


def _end_group(exit_code):
    """Kill every other process of this worker's group at once, then end with ``exit_code``."""
    me = os.getpid()
    for process in psutil.process_iter():
        try:
            if process.pid != me and os.getpgid(process.pid) == me:
                process.kill()
        except (OSError, psutil.Error):
            continue
    os._exit(exit_code)
