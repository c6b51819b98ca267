"""Keeping the queue table healthy on PostgreSQL where autovacuum does not.

The queue table (``atp_task``) churns: every task inserts, updates and deletes its
row. Its migration gives it aggressive autovacuum settings, but autovacuum may be off
(as on the development machine) or a minute behind a burst of enqueues. The claim
does not depend on the statistics (it forces a walk of the claim index), but every
other plan does, and dead rows slow the index walk down. So a daemon's maintenance
looks at the table's counters and, when they drifted far from what the planner
believes, analyzes it; when dead rows pile up that no vacuum has cleared, it vacuums
it. One daemon at a time does it (an advisory lock), and never waits for another
vacuum: each is a few milliseconds to a few hundred on a table of 100,000 rows.
"""

import logging

from django.db import OperationalError, connections

from atp.engine.base import database
from atp.models import Task

logger = logging.getLogger(__name__)

#: Analyze when the live rows differ from the planner's estimate by this many rows...
ANALYZE_MIN_CHANGE = 1000
#: ...and by this share of the estimate.
ANALYZE_MIN_RATIO = 0.5
#: Vacuum when there are this many dead rows and more dead than live ones.
VACUUM_MIN_DEAD = 10_000
#: The vacuum: with the indexes' entries of the dead rows removed, which PostgreSQL (14
#: and later) skips when the dead rows fill under 2 % of the table's pages, and then still
#: counts them as dead. A queue table a burst made large keeps its pages (migration
#: 0018), its indexes are what the claim walks, and a vacuum that cleared nothing would
#: be run again at every look.
VACUUM = "VACUUM (ANALYZE, INDEX_CLEANUP ON)"
#: Key of the advisory lock that lets one daemon at a time do it.
LOCK_KEY = 0x61747075  # "atpu"
LOCK_TIMEOUT_MS = 2000

STATE = """
SELECT c.reltuples, s.n_live_tup, s.n_dead_tup
FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.oid = %s::regclass
"""


def needs(estimated, live, dead):
    """Return what the queue table needs, ``"vacuum"``, ``"analyze"`` or None, from its counters.

    ``estimated`` is the planner's row count (negative: never analyzed), ``live`` and
    ``dead`` the statistics collector's.
    """
    if dead >= VACUUM_MIN_DEAD and dead > live:
        return "vacuum"
    estimated = max(estimated, 0)
    change = abs(live - estimated)
    if change >= ANALYZE_MIN_CHANGE and change >= ANALYZE_MIN_RATIO * estimated:
        return "analyze"
    return None


def tend_queue_table():
    """Analyze or vacuum the queue table if its counters ask for it; return what was done."""
    connection = connections[database()]
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return None
    table = Task._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(STATE, [table])
        row = cursor.fetchone()
        if row is None or (work := needs(*row)) is None:
            return None
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEY])
        if not cursor.fetchone()[0]:
            return None  # another daemon is at it
        try:
            # A vacuum someone else runs holds the table: give up rather than wait
            # (autovacuum gives way by itself).
            cursor.execute(f"SET lock_timeout = {LOCK_TIMEOUT_MS}")
            statement = VACUUM if work == "vacuum" else "ANALYZE"
            cursor.execute(f"{statement} {connection.ops.quote_name(table)}")
        except OperationalError as exc:
            logger.info("queue table not %sd: %s", work, exc)
            return None
        finally:
            cursor.execute("RESET lock_timeout")
            cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])
    estimated, live, dead = row
    logger.info("queue table %sd: planner estimate %d rows, %d live, %d dead",
                work, estimated, live, dead)
    return work
