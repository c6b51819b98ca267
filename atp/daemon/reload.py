"""``atpd --reload``: run atpd in a child process and restart it gracefully when code changes.

For development. A daemon runs the code it loaded when it started (``catalog``); this
parent process watches the project's Python files and, when one changes or a new one
appears, sends the running daemon SIGTERM (its running tasks finish, up to its
shutdown timeout, or go back to the queue) and starts a new one. SIGTERM or SIGINT
to the parent is passed on to the daemon, and the parent exits with it.
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

POLL_SECONDS = 1.0
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
        if changed is None:
            return child.returncode
        logger.warning("code changed (%s): restarting atpd", changed)
        child.send_signal(signal.SIGTERM)
        _wait(child, stop_requests)
        if stop_requests:
            return child.returncode


def _watch(child, snapshot, stop_requests):
    """Return the first changed file, or None once the child exited (passing signals on)."""
    passed_on = 0
    while child.poll() is None:
        if len(stop_requests) > passed_on:
            child.send_signal(signal.SIGTERM)
            passed_on = len(stop_requests)
        time.sleep(POLL_SECONDS / 4)
        if passed_on:
            continue  # stopping: no restart
        changed = _first_change(snapshot)
        if changed is not None:
            return changed
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

