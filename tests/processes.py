"""Starting real OS processes that share the test database."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.db import connection

from tests.pg_sessions import new_application_name

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def environment(**extra):
    """Return an environment in which a process connects to this test's database."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "ATP_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
        **extra,
    }


def start_module(module, *args, extra_env=None, **popen_options):
    """Start ``python -m module args...`` in the project root (``extra_env`` added to its
    environment); return the ``Popen``."""
    return subprocess.Popen(
        [sys.executable, "-m", module, *map(str, args)],
        cwd=PROJECT_ROOT, env=environment(**(extra_env or {})), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen_options,
    )


def wait_for_files(paths, timeout):
    """Wait until every path exists; raise ``TimeoutError`` after ``timeout`` seconds."""
    give_up = time.monotonic() + timeout
    while not all(Path(path).exists() for path in paths):
        if time.monotonic() > give_up:
            raise TimeoutError(f"still missing: {[p for p in paths if not Path(p).exists()]}")
        time.sleep(0.01)


#: Timers of daemons started by tests: a dead daemon is noticed within about 2 s.
FAST_TIMERS = {
    "ATP_HEARTBEAT_INTERVAL_SECONDS": 0.2,
    "ATP_DAEMON_TIMEOUT_SECONDS": 2.0,
    "ATP_WORKER_KILL_GRACE_SECONDS": 0.5,
}


class Daemon:
    """An ``atpd`` started as a real process, its output kept in a file.

    Its PostgreSQL sessions (its workers' too) carry its ``application_name``
    (``tests.pg_sessions``). With ``hostname`` it runs in a UTS namespace of its own
    under that host name, as on another host (``unshare``, as root); with
    ``own_pid_namespace`` also in a PID namespace of its own, as in a container of its
    own.
    """

    def __init__(self, directory, *args, hostname=None, own_pid_namespace=False, **settings):
        self.log_path = Path(directory) / f"atpd-{time.monotonic_ns()}.log"
        self.log = open(self.log_path, "w")
        settings = {**FAST_TIMERS, **settings}
        self.application_name = new_application_name()
        env = environment(ATP_TEST_APPLICATION_NAME=self.application_name,
                          **{name: str(value) for name, value in settings.items()})
        command = [sys.executable, "-m", "django", "atpd", "--log-level", "DEBUG", *map(str, args)]
        # unshare forks the daemon only into a PID namespace of its own.
        self.has_launcher = hostname is not None and own_pid_namespace
        if hostname is not None:
            command = namespaced(command, hostname, own_pid_namespace)
        self.process = subprocess.Popen(
            command, cwd=PROJECT_ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )

    @property
    def pid(self):
        """Return the daemon's pid as this process sees it."""
        if not self.has_launcher:
            return self.process.pid
        import psutil

        launcher = psutil.Process(self.process.pid)
        wait_until(launcher.children, timeout=10, message="atpd started in its namespace")
        return launcher.children()[0].pid

    def output(self):
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text()

    def signal(self, signum):
        os.kill(self.pid, signum)

    def freeze(self):
        """Stop the daemon (SIGSTOP), as a debugger or a paused process would, outside a
        write transaction.

        On SQLite a process stopped inside one holds the whole database's write lock
        until it thaws, and no server can end it (docs/daemon.md): every other daemon
        waits, the rescuer among them. There, a stop that lands inside one is undone and
        tried again until the lock is free while the daemon is stopped. Elsewhere the
        server ends a frozen session's transaction itself (tests/daemon/test_outage.py).
        """
        self.signal(signal.SIGSTOP)
        if connection.vendor != "sqlite":
            return
        for _ in range(500):
            if not sqlite_write_lock_held(connection.settings_dict["NAME"]):
                return
            self.signal(signal.SIGCONT)
            time.sleep(0.01)
            self.signal(signal.SIGSTOP)
        raise AssertionError(f"atpd held SQLite's write lock at 500 stops:\n{self.output()[-5000:]}")

    def wait(self, timeout):
        """Wait for the daemon to exit; return its exit code."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"atpd did not exit in {timeout} s:\n{self.output()[-5000:]}") from None

    def stop(self):
        """Kill the daemon and whatever it started (an ``atpd --reload`` has a child)."""
        import psutil

        if self.process.poll() is None:
            try:
                descendants = psutil.Process(self.process.pid).children(recursive=True)
            except psutil.Error:
                descendants = []
            self.process.kill()
            self.process.wait()
            for process in descendants:
                try:
                    process.kill()
                except psutil.Error:
                    pass
        self.log.close()


def sqlite_write_lock_held(path):
    """Tell whether a connection holds SQLite's write lock on the database at ``path``."""
    import sqlite3

    probe = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as error:
        if "locked" not in str(error):
            raise
        return True
    else:
        probe.execute("ROLLBACK")
        return False
    finally:
        probe.close()


def namespaced(command, hostname, own_pid_namespace):
    """Return ``command`` run under ``hostname`` in namespaces of its own (needs root)."""
    unshare = ["unshare", "--uts"]
    if own_pid_namespace:
        unshare += ["--pid", "--fork", "--mount-proc", "--kill-child"]
    set_name = "import os, socket, sys; socket.sethostname(sys.argv[1]); os.execv(sys.argv[2], sys.argv[2:])"
    return [*unshare, "--", sys.executable, "-c", set_name, hostname, *command]


def can_make_namespaces():
    """Return whether this process may start others in namespaces of their own."""
    import shutil

    return os.geteuid() == 0 and shutil.which("unshare") is not None


def wait_until(predicate, timeout, interval=0.05, message="condition", output=None):
    """Poll ``predicate`` until it is true; raise ``AssertionError`` after ``timeout`` seconds.

    ``output``, a function returning a process's log, adds its end to the error.
    """
    give_up = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > give_up:
            said = f"; it said:\n{output()[-4000:]}" if output else ""
            raise AssertionError(f"{message} not reached in {timeout} s{said}")
        time.sleep(interval)
