"""Waking idle daemons when tasks become runnable: PostgreSQL's LISTEN/NOTIFY.

The notification is sent inside the transaction that makes tasks runnable, so
PostgreSQL delivers it at commit, and never for a transaction that rolls back.
On other databases daemons find new tasks by polling.
"""

from django.db import connections

from atp.engine.base import database

#: The channel daemons LISTEN on. Notifications carry no payload: any one means
#: "claim again".
QUEUE_CHANNEL = "atp_queue"


def notify_runnable():
    """Tell listening daemons, at commit, that tasks became runnable."""
    connection = connections[database()]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"NOTIFY {QUEUE_CHANNEL}")
