"""The daemon's retention: the ended tasks past their type's ``retention`` (and the
tombstones past its ``dedup_window``) purged in short turns that never hold the round
back.

The supervisor's one loop purges between its rounds, and claims and settles nothing
while it does. A purge deletes each task's rows from five tables: under ``make soak``
a batch of 500 took 200–300 ms on a busy machine, every few seconds, and the p99 wait
rose by as much once retention began. So a turn of the purge works for at most
``BUDGET_SECONDS`` (its last step may overrun that by one step), in steps of at most
``STEP_TASKS`` tasks (``ATP_PURGE_BATCH_SIZE`` when smaller), each its own transaction,
and leaves the rest to a turn ``GAP_SECONDS`` after it: the loop's rounds go between.

A sweep steps through every type once, then again through those whose step came back
full (more may be due), in turn, until none does; the next sweep, which takes on the
types registered meanwhile, begins at the duty's interval (a heartbeat). A type whose
step fails is left to the next sweep: it holds no other back.
"""

import time

from atp import engine
from atp.conf import conf

#: The most ended tasks one step of a turn deletes, in one transaction.
STEP_TASKS = 50
#: How long a turn may purge before it leaves the rest to the next.
BUDGET_SECONDS = 0.02
#: From the end of a turn to the next while the sweep is not done: the loop's own work
#: goes between.
GAP_SECONDS = 0.05


class Retention:
    """The sweep under way: the types it has yet to step through in this pass, and those
    whose step came back full, to step through again."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.pending = []
        self.again = []

    def purge(self):
        """Purge for one turn; return how soon the next turn is due while the sweep is not
        done, else None (at the duty's interval)."""
        began = self.clock()
        if not (self.pending or self.again):
            self.pending = engine.purge_plan()
        step = min(STEP_TASKS, conf.PURGE_BATCH_SIZE)
        while self.pending or self.again:
            if not self.pending:
                self.pending, self.again = self.again, []
            type_id = self.pending.pop(0)
            _, full = engine.purge_type_due(type_id, step)
            if full:
                self.again.append(type_id)
            if self.clock() - began >= BUDGET_SECONDS:
                break
        return GAP_SECONDS if self.pending or self.again else None
