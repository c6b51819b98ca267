"""A PostgreSQL server of the benchmark's own, configured as a fresh install is.

The machine's shared server may be tuned for tests (this one runs with autovacuum off);
a soak must meet what production meets: autovacuum, checkpoints, the default memory.
``PrivateCluster`` makes one with the machine's ``initdb`` in a directory of the
project's (``.bench/cluster``), on a port of its own, changing nothing but where it
listens (and logging its checkpoints and autovacuum runs), and removes it afterwards.
"""

import datetime
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

#: The statements the server logs as slow, in ms (``log_min_duration_statement``).
SLOW_STATEMENT_MS = 100
#: Where Debian puts the server's programs; PATH is looked at first.
BINARY_DIRECTORIES = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


def server_binary(name):
    """Return the path of PostgreSQL's ``name`` (``initdb``, ``pg_ctl``), or None."""
    found = shutil.which(name)
    if found:
        return found
    for directory in BINARY_DIRECTORIES:
        if (directory / name).exists():
            return str(directory / name)
    return None


class PrivateCluster:
    """A stock PostgreSQL cluster in ``directory``, listening on 127.0.0.1:``port``."""

    def __init__(self, directory, port=5499):
        self.directory = Path(directory).resolve()
        self.port = port
        self.data = self.directory / "data"
        self.log = self.directory / "server.log"

    @property
    def url(self):
        return f"postgres://postgres@127.0.0.1:{self.port}/atp_soak"

    def _run(self, *command):
        # initdb and the server refuse to run as root: as root, run them as postgres.
        if os.geteuid() == 0:
            command = ("runuser", "-u", "postgres", "--", *command)
        subprocess.run(command, check=True, capture_output=True, text=True)

    @property
    def kept_log(self):
        """Where ``stop`` keeps the server's log."""
        return self.directory.with_name(self.directory.name + "-server.log")

    def start(self):
        """Create the cluster (anew) and start it; return its URL. Raise RuntimeError
        when this machine has no PostgreSQL server programs."""
        initdb, pg_ctl = server_binary("initdb"), server_binary("pg_ctl")
        if not (initdb and pg_ctl):
            raise RuntimeError("no PostgreSQL server here (initdb, pg_ctl): set "
                               "ATP_SOAK_DATABASE_URL to a stock server's database instead")
        self.stop()
        self.kept_log.unlink(missing_ok=True)  # an earlier run's
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True)
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres", "postgres")
        self._run(initdb, "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "--no-instructions", "-E", "UTF8")
        self._run(pg_ctl, "-D", str(self.data), "-l", str(self.log), "-w", "start", "-o",
                  f"-p {self.port} -c listen_addresses=127.0.0.1 "
                  f"-c unix_socket_directories={self.directory} "
                  # What the server logs, to tell a slow minute's cause: nothing else;
                  # stamped in UTC whatever the machine's zone (server_log_events).
                  "-c log_checkpoints=on -c log_autovacuum_min_duration=0 "
                  f"-c log_min_duration_statement={SLOW_STATEMENT_MS} -c log_lock_waits=on "
                  "-c log_timezone=UTC")
        self._wait_until_ready()
        return self.url

    def _wait_until_ready(self, timeout_seconds=30):
        import psycopg

        give_up = time.monotonic() + timeout_seconds
        while True:
            try:
                with psycopg.connect(f"postgres://postgres@127.0.0.1:{self.port}/postgres",
                                     autocommit=True, connect_timeout=2) as admin:
                    admin.execute("CREATE DATABASE atp_soak")
                return
            except psycopg.OperationalError:
                if time.monotonic() > give_up:
                    raise
                time.sleep(0.2)

    def settings(self):
        """Return the server settings a soak depends on, as the server reports them."""
        import psycopg

        names = ("server_version", "autovacuum", "shared_buffers", "checkpoint_timeout",
                 "max_wal_size", "synchronous_commit")
        with psycopg.connect(self.url) as connection:
            return {name: connection.execute(f"SHOW {name}").fetchone()[0] for name in names}

    def stop(self):
        """Stop the server, if it runs, and remove its files but its log (kept beside
        the cluster's directory, ``<directory>-server.log``)."""
        pg_ctl = server_binary("pg_ctl")
        if pg_ctl and (self.data / "postmaster.pid").exists():
            try:
                self._run(pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "stop")
            except subprocess.CalledProcessError:
                pass
        if self.log.exists():
            shutil.copy(self.log, self.kept_log)
        shutil.rmtree(self.directory, ignore_errors=True)


#: A line of the server's log: its time (UTC: the cluster's ``log_timezone``), then what
#: it says.
LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) UTC \[\d+\] LOG:  (.*)$")
SLOW = re.compile(r"duration: ([\d.]+) ms  (?:statement|execute [^:]*): (.*)")


def server_log_events(path):
    """Return what the server's log at ``path`` says a slow minute may hang on, in order:
    ``(when it ended, UTC datetime; "statement", milliseconds, its first words)`` for each
    statement logged as slow (over ``SLOW_STATEMENT_MS``), and ``(when, "checkpoint",
    None, what)`` for each checkpoint's start and end."""
    events = []
    for line in Path(path).read_text(errors="replace").splitlines():
        matched = LOG_LINE.match(line)
        if not matched:
            continue
        when = datetime.datetime.strptime(matched[1], "%Y-%m-%d %H:%M:%S.%f").replace(
            tzinfo=datetime.UTC)
        said = matched[2]
        if slow := SLOW.match(said):
            events.append((when, "statement", float(slow[1]), " ".join(slow[2].split()[:3])))
        elif said.startswith("checkpoint "):
            events.append((when, "checkpoint", None, said.split(";")[0]))
    return events
