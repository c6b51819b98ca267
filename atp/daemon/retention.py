"""The daemon's retention: the ended tasks past their type's ``retention`` (and the
tombstones past its ``dedup_window``) purged in short turns that never hold the round
back.

The supervisor's one loop purges between its rounds, and claims and settles nothing
while it does. A purge deletes each task's rows from five tables: under ``make soak``
a batch of 500 took 200–300 ms on a busy machine, every few seconds, and the p99 wait
rose by as much once retention began. So a turn of the purge works for at most
``BUDGET_SECONDS`` (its last step may overrun that by one step), in steps of at most
``STEP`` tasks (``ATP_PURGE_BATCH_SIZE`` when smaller), each its own transaction, and
leaves the rest to a turn ``GAP_SECONDS`` later: the loop's rounds go between. One
sweep goes through every type, staying on a type while its batches come back full;
once a sweep is done the next waits for the duty's interval (a heartbeat).
"""

import time

from atp import engine
from atp.conf import conf

#: The most ended tasks one step of a turn deletes, in one transaction.
STEP = 50
#: How long a turn may purge before it leaves the rest to the next.
BUDGET_SECONDS = 0.02
#: Between two turns of a sweep that is not done: the loop's own work goes between, and
#: retention still keeps pace (at least STEP tasks every 70 ms).
GAP_SECONDS = 0.05


class Retention:
    """The sweep under way: the types it has yet to find clean, in key order."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.pending = []

    def purge(self):
        """Purge for one turn; return how soon the next turn is due while the sweep is not
        done, else None (at the duty's interval)."""
        began = self.clock()
        if not self.pending:
            self.pending = engine.purge_plan()
        step = min(STEP, conf.PURGE_BATCH_SIZE)
        while self.pending:
            _, full = engine.purge_type_due(self.pending[0], step)
            if not full:
                del self.pending[0]
            if self.clock() - began >= BUDGET_SECONDS:
                break
        return GAP_SECONDS if self.pending else None
