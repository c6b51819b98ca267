"""Waking idle daemons when tasks become runnable.

By the database's ``wakeup`` (``atp.engine.databases``): a ``"notify"`` is sent on the
queue channel inside the transaction that makes tasks runnable (PostgreSQL delivers it
at commit, and never for a transaction that rolls back); a ``"doorbell"`` is a datagram
to each local daemon's socket (``atp.engine.doorbell``), sent once the transaction has
committed. Daemons poll besides, so a lost wake-up only delays a task.
"""

from django.db import connections, transaction

from atp.engine import doorbell
from atp.engine.base import database
from atp.engine.databases import database_of

#: The channel daemons LISTEN on. Notifications carry no payload: any one means
#: "claim again".
QUEUE_CHANNEL = "atp_queue"


def notify_runnable():
    """Tell idle daemons, at commit, that tasks became runnable."""
    alias = database()
    connection = connections[alias]
    database_ = database_of(connection)
    if database_.wakeup == "notify":
        database_.notify(connection, QUEUE_CHANNEL)
    elif (path := database_.doorbell_directory(connection)) is not None:
        transaction.on_commit(lambda: doorbell.ring(path), using=alias)
