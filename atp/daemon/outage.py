"""Riding out a database that goes away: recognising it, reconnecting, retrying.

A daemon outlives database restarts and killed connections. Connection errors are
told apart from other database errors; the broken connections are closed, so that
the next query opens a new one, and the work is tried again with back-off. A database
that answers "busy" (SQLite's write lock held elsewhere, a deadlock) is not away: the
work is simply tried again, on the same connection, without an outage.
"""

import logging
import os
import time

from django.db import InterfaceError, InternalError, OperationalError, connections
from django.db.backends.signals import connection_created

from atp.conf import conf
from atp.daemon.suspension import writing
from atp.db import is_retryable
from atp.engine.databases import database_of
from atp.exceptions import InvalidTransition, TaskNotFound

logger = logging.getLogger(__name__)

#: Errors that mean "the database is unreachable right now", not "this query is wrong":
#: among them the end of a session the server closed (PostgreSQL says so with an
#: InternalError: its idle-in-transaction time-out ended a daemon frozen in a transaction).
CONNECTION_ERRORS = (OperationalError, InterfaceError, InternalError)
#: Errors that mean the task was decided elsewhere (changed, deleted) meanwhile.
TASK_MOVED_ON = (InvalidTransition, TaskNotFound)
FIRST_BACKOFF_SECONDS = 0.2
MAX_BACKOFF_SECONDS = 5.0


#: The supervisor's own database calls wait at most this long: its loop also watches
#: workers and signals, and a lock or a dead network must not freeze it.
SUPERVISOR_WAIT_SECONDS = 1.0
SUPERVISOR_STATEMENT_TIMEOUT_SECONDS = 30


def harden_connections(alias):
    """Make this process's database calls fail fast rather than hang (the supervisor's).

    Connections get what their database has for it (``Database.harden``: on PostgreSQL
    a connect timeout and TCP keepalives, unless the project sets them) and per-session
    limits (``Database.limit_waits``: a statement timeout, SQLite's busy timeout, and
    the daemon time-out for a transaction left idle: a daemon frozen inside one, by
    SIGSTOP or a paused machine, would otherwise hold its locks, and stall the daemons
    waiting on them, until it thaws).
    Forked workers inherit the connection options but not the per-session limits,
    which apply to this process only.
    """
    database = database_of(alias)
    database.harden(connections[alias].settings_dict)
    owner = os.getpid()

    def limit_waits(sender, connection, **kwargs):
        if os.getpid() != owner or connection.alias != alias:
            return
        with connection.cursor() as cursor:
            database.limit_waits(cursor, lock_wait_seconds=SUPERVISOR_WAIT_SECONDS,
                                 statement_seconds=SUPERVISOR_STATEMENT_TIMEOUT_SECONDS,
                                 idle_in_transaction_seconds=conf.DAEMON_TIMEOUT_SECONDS)

    connection_created.connect(limit_waits, weak=False, dispatch_uid=f"atp.supervisor.{alias}")


def close_connections():
    """Close this process's database connections, whatever state they are in."""
    for connection in connections.all(initialized_only=True):
        try:
            connection.close()
        except Exception:
            logger.debug("closing %s failed", connection.alias, exc_info=True)


def discard_broken_connections():
    """Close connections that failed since they were last used, so the next query reconnects."""
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None and connection.errors_occurred:
            if not connection.is_usable():
                close_connections()
                return
            connection.errors_occurred = False


class Backoff:
    """Delays that double from ``FIRST_BACKOFF_SECONDS`` up to ``MAX_BACKOFF_SECONDS``."""

    def __init__(self):
        self.delay = FIRST_BACKOFF_SECONDS

    def next(self):
        delay, self.delay = self.delay, min(self.delay * 2, MAX_BACKOFF_SECONDS)
        return delay


def retry_while_unreachable(call, description):
    """Return ``call()``, retrying with back-off as long as the database is unreachable.

    Used by workers for writes that must not be lost; the worker's lease watchdog
    ends the process if the database stays away too long. A pause waits until the
    write is over (see ``suspension``).
    """
    backoff = Backoff()
    while True:
        try:
            with writing():
                return call()
        except CONNECTION_ERRORS as exc:
            delay = backoff.next()
            busy = is_retryable(exc)
            logger.warning("%s: database %s (%s); retrying in %.1f s",
                           description, "busy" if busy else "unreachable", exc, delay)
            if not busy:
                close_connections()
        time.sleep(delay)


#: A database busy for longer than this without a break is worth an operator's look.
LONG_CONTENTION_SECONDS = 10.0


class Contention:
    """Rounds that met a busy database: retried at once, logged only when it lasts."""

    def __init__(self):
        self.since = None
        self.warned = False

    def met(self, exc):
        """Record a round that ended on a busy database (``atp.db.is_retryable``)."""
        now = time.monotonic()
        if self.since is None:
            self.since = now
        logger.debug("database busy (%s): the round is tried again", exc)
        if not self.warned and now - self.since > LONG_CONTENTION_SECONDS:
            self.warned = True
            logger.warning("database busy for %.0f s (%s): a long transaction elsewhere "
                           "holds the lock this daemon needs", now - self.since, exc)

    def end(self):
        """Record a round that went through."""
        if self.warned:
            logger.warning("database no longer busy after %.1f s", time.monotonic() - self.since)
        self.since, self.warned = None, False


class Outage:
    """The supervisor's view of the database: reachable, or away since when."""

    def __init__(self):
        self.since = None
        self.retry_at = 0.0
        self.backoff = Backoff()

    @property
    def is_on(self):
        return self.since is not None

    def is_waiting(self, now):
        """Return whether the next try is not due yet."""
        return self.is_on and now < self.retry_at

    def begin(self, exc):
        """Record a failed round: log the first one, close connections, schedule a retry."""
        now = time.monotonic()
        if self.since is None:
            self.since = now
            self.backoff = Backoff()
            logger.error("database unavailable (%s): running tasks go on, retrying", exc)
        close_connections()
        self.retry_at = now + self.backoff.next()

    def end(self):
        """Record a successful round; return whether it ended an outage."""
        if self.since is None:
            return False
        logger.warning("database available again after %.1f s", time.monotonic() - self.since)
        self.since = None
        return True
