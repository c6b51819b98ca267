"""Being woken when tasks become runnable: LISTEN on PostgreSQL, nothing elsewhere.

The listener has a connection of its own, in autocommit mode, apart from the one
Django uses for queries. It is closed before the supervisor forks a worker (a child
must never inherit a live libpq connection) and opened again on the next round.
"""

import logging
import time

from django.db import connections

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
        self.retry_at = 0.0
        self.is_failing = False

    @property
    def is_supported(self):
        return connections[self.alias].vendor == "postgresql"

    def ensure_connected(self):
        """Connect and LISTEN if supported, not connected, and not waiting to retry."""
        if self.connection is not None or not self.is_supported:
            return
        if time.monotonic() < self.retry_at:
            return
        import psycopg

        try:
            params = connections[self.alias].get_connection_params()
            connection = psycopg.connect(**params, autocommit=True)
            connection.execute(f"LISTEN {QUEUE_CHANNEL}")
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

    def fileno(self):
        return self.connection.fileno()

    def drain(self):
        """Consume the notifications that arrived; return whether there were any."""
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
        if self.connection is not None:
            import psycopg

            try:
                self.connection.close()
            except psycopg.Error:
                logger.debug("closing the LISTEN connection failed", exc_info=True)
            self.connection = None
