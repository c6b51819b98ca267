"""Pausing a worker without freezing it in the middle of a database write.

A process stopped inside a transaction keeps its locks: on SQLite the whole database's
write lock, on PostgreSQL its task's row, which the operator's ``resume`` then waits
for, forever. So the supervisor asks a worker to pause with SIGTSTP, which the worker
handles: it stops itself (SIGSTOP) at once when its handler is running and none of
atp's writes is in progress, after the write commits when one is, and not at all
between tasks. Processes the handler started are stopped directly.
"""

import os
import signal
from contextlib import contextmanager

_handler_running = False
_writes = 0
_pending = False


def install():
    """Handle pause requests in this (worker) process."""
    signal.signal(signal.SIGTSTP, _on_request)
    signal.signal(signal.SIGCONT, _on_resume)


def _on_resume(signum, frame):
    global _pending
    _pending = False  # resumed before a deferred pause took effect: drop it


def _on_request(signum, frame):
    global _pending
    if not _handler_running:
        return  # between tasks there is nothing to pause
    if _writes:
        _pending = True
    else:
        _stop()


def _stop():
    os.kill(os.getpid(), signal.SIGSTOP)


@contextmanager
def handler_running():
    """Mark the time a handler runs: the only time the worker may be paused."""
    global _handler_running, _pending
    _handler_running = True
    try:
        yield
    finally:
        _handler_running = _pending = False


@contextmanager
def writing():
    """Hold a pause off until the database write inside is over."""
    global _writes, _pending
    _writes += 1
    try:
        yield
    finally:
        _writes -= 1
        if not _writes and _pending and _handler_running:
            _pending = False
            _stop()
