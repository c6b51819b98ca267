"""Deterministic interleavings of two queue verbs, each on a database connection of its own.

``interleave(first, second, pause_after=...)`` runs ``first`` in a thread until just
after its first statement matching ``pause_after`` (a regular expression on the SQL),
inside its transaction. It then runs ``second`` in another thread until ``second``
either returns or waits for a lock that ``first`` holds, and only then lets ``first``
go on. So the order of the two transactions' statements is the same at every run:
no sleeps, no luck.

On PostgreSQL "waits for a lock" is read from ``pg_stat_activity`` (``tests.pg_sessions``),
on MariaDB from its process list: a statement of the second call's still running after
``MARIADB_BLOCKED_MS`` (these tests' statements take a millisecond; a row lock met while
the optimizer reads a constant row is not in ``INNODB_TRX``). The
statements are matched with identifiers quoted as PostgreSQL and SQLite quote them
(``"atp_task"``), whatever the database's quotes. SQLite has one
writer at a time: once ``first`` is paused inside its write transaction, ``second``
cannot write before ``first`` commits, so ``first`` is let go as soon as ``second``
has started.
"""

import re
import threading
import time
from dataclasses import dataclass

from django.db import connection, connections

from tests import pg_sessions

TIMEOUT_SECONDS = 20
POLL_SECONDS = 0.01
#: How long ``second`` gets on SQLite before ``first`` is let go (it can only wait).
SQLITE_HEAD_START_SECONDS = 0.2


@dataclass
class Outcome:
    """What a call returned, or the exception it raised."""

    result: object = None
    error: BaseException = None
    #: Of the second call: whether it was still running (waiting for the first) when
    #: the first was let go.
    waited: bool = False

    def get(self):
        """Return the result; raise what the call raised."""
        if self.error is not None:
            raise self.error
        return self.result


class _Thread(threading.Thread):
    def __init__(self, call, name):
        super().__init__(name=name, daemon=True)
        self.call = call
        self.outcome = Outcome()
        self.backend_pid = None
        self.started_calling = threading.Event()

    def run(self):
        try:
            self.backend_pid = session_id()
            self.started_calling.set()
            self.outcome.result = self.call()
        except BaseException as exc:  # handed to the test, which raises it if it wants
            self.outcome.error = exc
        finally:
            self.started_calling.set()
            connections.close_all()


def interleave(first, second, *, pause_after):
    """Run ``first`` up to a statement, all of ``second`` it does not block, then the rest.

    Return the two ``Outcome``. Raise ``AssertionError`` if ``first`` never runs a
    statement matching ``pause_after``.
    """
    pattern = re.compile(pause_after)
    reached, go = threading.Event(), threading.Event()

    def pause_once(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if not reached.is_set() and pattern.search(sql.replace("`", '"')):
            _until_the_server_ran_it(context["cursor"])
            reached.set()
            go.wait(TIMEOUT_SECONDS)
        return result

    def run_first():
        with connection.execute_wrapper(pause_once):
            return first()

    one = _Thread(run_first, "interleave-first")
    one.start()
    while not reached.wait(POLL_SECONDS):
        if not one.is_alive():
            raise AssertionError(
                f"the first call ended without a statement matching {pause_after!r}: "
                f"{one.outcome.error or one.outcome.result!r}"
            )
    two = _Thread(second, "interleave-second")
    two.start()
    two.started_calling.wait(TIMEOUT_SECONDS)
    _wait_until_done_or_blocked(two)
    two.outcome.waited = two.is_alive()
    go.set()
    one.join(TIMEOUT_SECONDS)
    two.join(TIMEOUT_SECONDS)
    assert not one.is_alive() and not two.is_alive(), "an interleaved call never returned"
    return one.outcome, two.outcome


def _until_the_server_ran_it(cursor):
    """Return once the server has run the statement ``cursor`` just sent: at once, but
    in psycopg's pipeline mode (``atp.engine.postgresql._together``), where executing
    only sends it, read its rows (which has the server answer so far) and put the
    cursor back at its first row for the caller."""
    raw = cursor.cursor
    pgconn = getattr(getattr(raw, "connection", None), "pgconn", None)
    if pgconn is None or not pgconn.pipeline_status:
        return
    import psycopg

    try:
        raw.fetchall()
    except psycopg.ProgrammingError:  # a statement without rows, answered all the same
        return
    raw.scroll(0, mode="absolute")


def _wait_until_done_or_blocked(thread):
    if thread.backend_pid is None:  # SQLite: it cannot get past the writer we paused
        thread.join(SQLITE_HEAD_START_SECONDS)
        return
    give_up = time.monotonic() + TIMEOUT_SECONDS
    while thread.is_alive() and not is_waiting_for_lock(thread.backend_pid):
        if time.monotonic() > give_up:
            raise AssertionError("the second call neither returned nor waited for a lock")
        time.sleep(POLL_SECONDS)


#: How long a statement of the second call runs on MariaDB before it is taken as waiting.
MARIADB_BLOCKED_MS = 300
#: What identifies this connection's session to the server, by database (SQLite: none).
SESSION_ID = {"postgresql": "SELECT pg_backend_pid()", "mysql": "SELECT CONNECTION_ID()"}


def session_id():
    """Return the server's identifier of this thread's connection (None on SQLite)."""
    statement = SESSION_ID.get(connection.vendor)
    if statement is None:
        return None
    with connection.cursor() as cursor:
        cursor.execute(statement)
        return cursor.fetchone()[0]


def is_waiting_for_lock(backend_pid):
    """Return whether the session ``backend_pid`` waits for a lock right now."""
    if connection.vendor == "mysql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM information_schema.PROCESSLIST WHERE ID = %s AND "
                           "COMMAND = 'Query' AND TIME_MS > %s", [backend_pid, MARIADB_BLOCKED_MS])
            return cursor.fetchone() is not None
    return pg_sessions.wait_event_type(backend_pid) == "Lock"
