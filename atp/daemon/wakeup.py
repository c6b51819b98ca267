"""Being woken when tasks become runnable, by the database's ``wakeup``
(``atp.engine.databases``): LISTEN where it has a notification channel (PostgreSQL), a
doorbell socket where the daemons share a host with the database's file
(``atp.engine.doorbell``, SQLite), nothing where they can only poll.

The LISTEN listener has a connection of its own, in autocommit mode, apart from
the one Django uses for queries. It is closed before the supervisor forks a worker (a
child must never inherit a live libpq connection) and opened again on the next round.
The doorbell socket stays open; the workers close their copy.
"""

import logging
import time

from django.db import connections

from atp.engine import doorbell
from atp.engine.databases import database_of
from atp.engine.notify import QUEUE_CHANNEL

logger = logging.getLogger(__name__)


#: How long to wait before trying again to LISTEN after a failure (polling goes on).
RECONNECT_SECONDS = 2.0


class Listener:
    """A LISTEN connection on the queue channel, when the database has one.

    It only makes the daemon quicker: while it cannot connect, the daemon polls, and
    its failures never stop the daemon.
    """

    def __init__(self, alias):
        self.alias = alias
        self.connection = None
        self.doorbell = None
        self.retry_at = 0.0
        self.is_failing = False

    @property
    def database(self):
        return database_of(self.alias)

    @property
    def is_supported(self):
        return self.database.wakeup != "poll"

    @property
    def is_listening(self):
        return self.connection is not None or self.doorbell is not None

    def ensure_connected(self):
        """Connect and LISTEN if supported, not connected, and not waiting to retry."""
        if self.is_listening or not self.is_supported:
            return
        if time.monotonic() < self.retry_at:
            return
        if self.database.wakeup == "doorbell":
            self._bind_doorbell()
            return
        import psycopg

        try:
            connection = self.database.listen(connections[self.alias], QUEUE_CHANNEL)
        except psycopg.Error as exc:
            self.retry_at = time.monotonic() + RECONNECT_SECONDS
            if not self.is_failing:
                logger.warning("cannot LISTEN for new tasks (%s): polling until it can", exc)
            self.is_failing = True
            return
        if self.is_failing:
            logger.info("listening for new tasks again")
        self.is_failing = False
        self.connection = connection

    def _bind_doorbell(self):
        path = self.database.doorbell_directory(connections[self.alias])
        if path is None:
            self.retry_at = float("inf")  # an in-memory database: nobody else can ring
            return
        try:
            self.doorbell = doorbell.Doorbell(path)
        except OSError as exc:
            self.retry_at = float("inf")
            logger.warning("cannot bind a doorbell socket in %s (%s): polling only", path, exc)

    def fileno(self):
        if self.doorbell is not None:
            return self.doorbell.fileno()
        return self.connection.fileno()

    def private_fds(self):
        """Return the descriptors a forked worker must close."""
        return [] if self.doorbell is None else [self.doorbell.fileno()]

    def before_fork(self):
        """Close what a forked child must not share: the LISTEN connection."""
        self._close_connection()

    def drain(self):
        """Consume the notifications that arrived; return whether there were any."""
        if self.doorbell is not None:
            return self.doorbell.drain()
        if self.connection is None:
            return False
        import psycopg

        try:
            # notifies(timeout=...) needs psycopg 3.2 (setup.cfg requires it).
            return any(True for _ in self.connection.notifies(timeout=0))
        except psycopg.Error as exc:  # a dropped connection: poll until it is back
            logger.warning("lost the LISTEN connection (%s); polling until it is back", exc)
            self.close()
            return True

    def close(self):
        """Stop listening for good (the PostgreSQL connection comes back on the next
        ``ensure_connected``)."""
        self._close_connection()
        if self.doorbell is not None:
            self.doorbell.close()
            self.doorbell = None

    def _close_connection(self):
        if self.connection is not None:
            import psycopg

            try:
                self.connection.close()
            except psycopg.Error:
                logger.debug("closing the LISTEN connection failed", exc_info=True)
            self.connection = None
