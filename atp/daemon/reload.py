"""``atpd --reload``: run atpd in a child process and restart it gracefully when code changes.

For development. A daemon runs the code it loaded when it started (``catalog``); this
parent process reads the project's Python files every second and, when one changes or
a new one appears, sends the running daemon SIGTERM (its running tasks finish, up to
its shutdown timeout, or go back to the queue) and starts a new one. A daemon that
fails (a syntax error in the code just saved) is started again at the next change.
SIGTERM or SIGINT to the parent is passed on to the daemon, and the parent exits with it.

The files are compared here rather than by Django's autoreloader, whose ``StatReloader``
ignores a file that appears (a new ``tasks.py``) and restarts by exiting the process
that watches, where atpd must be stopped gracefully in a process of its own.
"""

import logging
import signal
import subprocess
import sysconfig
import time
from pathlib import Path

from django.apps import apps
from django.utils import autoreload

logger = logging.getLogger(__name__)

#: How often the project's files are read for changes.
POLL_SECONDS = 1.0
#: How often the parent looks at its daemon and at signals to pass on.
TICK_SECONDS = 0.1
RELOAD_OPTION = "--reload"


def run_with_reload():
    """Run atpd in a child process, restarting it when code changes; return its exit code."""
    command = [argument for argument in autoreload.get_child_arguments()
               if argument != RELOAD_OPTION]
    stop_requests = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda signum, frame: stop_requests.append(signum))
    while True:
        snapshot = code_snapshot()
        # A session of its own: Ctrl-C reaches this parent only, which passes one
        # SIGTERM on and so lets running tasks finish.
        child = subprocess.Popen(command, start_new_session=True)
        changed = _watch(child, snapshot, stop_requests)
        if changed is None:  # the daemon exited
            if stop_requests or child.returncode == 0:
                return child.returncode
            # It failed (a syntax error in a module, a failed check...) and said why:
            # the developer fixes the code, and the new code gets a new daemon.
            logger.error("atpd exited with code %s: it starts again when the code changes",
                         child.returncode)
            changed = _watch(None, snapshot, stop_requests)
            if changed is None:
                return child.returncode
            logger.warning("code changed (%s): starting atpd", changed)
            continue
        logger.warning("code changed (%s): restarting atpd", changed)
        child.send_signal(signal.SIGTERM)
        _wait(child, stop_requests)
        if stop_requests:
            return child.returncode


def _watch(child, snapshot, stop_requests):
    """Return the first file changed since ``snapshot``, or None once ``child`` exited
    (or, without a child, once a stop is requested); signals go on to the child."""
    passed_on = 0
    next_read = time.monotonic() + POLL_SECONDS
    while child is None or child.poll() is None:
        if len(stop_requests) > passed_on:
            if child is None:
                return None
            child.send_signal(signal.SIGTERM)
            passed_on = len(stop_requests)
        time.sleep(TICK_SECONDS)
        if passed_on or time.monotonic() < next_read:
            continue  # stopping (no restart), or not yet time to read the files
        changed = _first_change(snapshot)
        if changed is not None:
            return changed
        next_read = time.monotonic() + POLL_SECONDS
    return None


def _wait(child, stop_requests):
    passed_on = len(stop_requests)
    while child.poll() is None:
        if len(stop_requests) > passed_on:  # a second signal: the daemon stops at once
            child.send_signal(signal.SIGTERM)
            passed_on = len(stop_requests)
        time.sleep(0.05)


def watched_files():
    """Return the Python files of the project: loaded modules and every file of its apps.

    Files inside the Python installation (the standard library, site-packages) are
    left out: they do not change while you develop.
    """
    installed = {Path(sysconfig.get_paths()[name]).resolve()
                 for name in ("stdlib", "purelib", "platlib")}

    def is_project_file(path):
        return not any(root in path.parents for root in installed)

    files = {path.resolve() for path in autoreload.iter_all_python_module_files()}
    for config in apps.get_app_configs():
        root = Path(config.path).resolve()
        if is_project_file(root):  # a new tasks.py in one of your apps counts too
            files.update(path.resolve() for path in root.rglob("*.py"))
    return sorted(path for path in files if is_project_file(path))


def code_snapshot():
    """Return ``{path: modification time}`` of the watched files."""
    return {path: _mtime(path) for path in watched_files()}


def _first_change(snapshot):
    now = code_snapshot()
    for path in sorted(now.keys() | snapshot.keys()):
        if now.get(path) != snapshot.get(path):
            return str(path)
    return None


def _mtime(path):
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None

