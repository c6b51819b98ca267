"""Waking idle daemons when tasks become runnable.

On PostgreSQL it is a NOTIFY on the queue channel, sent inside the transaction that
makes tasks runnable: PostgreSQL delivers it at commit, and never for a transaction
that rolls back. On a SQLite file it is a datagram to each local daemon's socket
(``atp.engine.doorbell``), sent once the transaction has committed. Daemons poll
besides, so a lost wake-up only delays a task.
"""

from django.db import connections, transaction

from atp.engine import doorbell
from atp.engine.base import database

#: The channel daemons LISTEN on. Notifications carry no payload: any one means
#: "claim again".
QUEUE_CHANNEL = "atp_queue"


def notify_runnable():
    """Tell idle daemons, at commit, that tasks became runnable."""
    alias = database()
    connection = connections[alias]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"NOTIFY {QUEUE_CHANNEL}")
    elif (path := doorbell.directory(connection)) is not None:
        transaction.on_commit(lambda: doorbell.ring(path), using=alias)
