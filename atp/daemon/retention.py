"""The daemon's retention: the ended tasks past their type's ``retention`` (and the
tombstones past its ``dedup_window``) purged in short turns that never hold the round
back.

The supervisor's one loop purges between its rounds, and claims and settles nothing
while it does. A purge deletes each task's rows from five tables: under ``make soak``
a batch of 500 took 200–300 ms on a busy machine, every few seconds, and the p99 wait
rose by as much once retention began. So a turn of the purge works for at most
``BUDGET_SECONDS`` (its last step may overrun that by one step), in steps of tasks, each
its own transaction, and leaves the rest to the next turn, which comes with the loop's
next round: a round goes between two turns.

It must still keep pace with what ends, however fast: a step's fixed cost (the type
read, the rows found, a statement a table, the commit) is most of a small step's. A
step begins at ``STEP_TASKS`` tasks; one that came back full (more is due) in less than
half the budget makes the next twice as large, up to ``ATP_PURGE_BATCH_SIZE``, and a full
one that took longer than the budget makes it half as large, down to ``MIN_STEP_TASKS``:
a step then takes about the budget, whatever the machine. Unless retention falls behind:
a sweep not done after a heartbeat interval (the tasks end faster than steps that keep
to the budget purge them) grows its steps whatever they take, up to
``ATP_PURGE_BATCH_SIZE``, where a task costs the purge least (a step of 500 tasks about a
third of what each costs in a step of 50): the loop is then held longer, but the tables
stay bounded. (Steps of 50 tasks, a turn 50 ms after the last, purged about 300 tasks a
second in ``make bench``'s stream of 2,000 a second, on PostgreSQL and SQLite: the task
table grew without bound.)

A sweep steps through every type once, then again through those whose step came back
full (more may be due), in turn, until none does; the next sweep, which takes on the
types registered meanwhile, begins at the duty's interval (a heartbeat). A type whose
step fails is left to the next sweep: it holds no other back.
"""

import time

from atp import engine
from atp.conf import conf

#: How many ended tasks the first step deletes, in one transaction; then as the pace
#: calls for, between ``MIN_STEP_TASKS`` and ``ATP_PURGE_BATCH_SIZE``.
STEP_TASKS = 50
MIN_STEP_TASKS = 10
#: How long a turn may purge before it leaves the rest to the next.
BUDGET_SECONDS = 0.02


class Retention:
    """The sweep under way: the types it has yet to step through in this pass, and those
    whose step came back full, to step through again."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.pending = []
        self.again = []
        self.step = STEP_TASKS
        self.sweep_began = None

    def purge(self):
        """Purge for one turn; return 0 while the sweep is not done (the next turn comes
        with the next round), else None (at the duty's interval)."""
        began = self.clock()
        if not (self.pending or self.again):
            self.pending = engine.purge_plan()
            self.sweep_began = began
        while self.pending or self.again:
            if not self.pending:
                self.pending, self.again = self.again, []
            type_id = self.pending.pop(0)
            step = min(self.step, conf.PURGE_BATCH_SIZE)
            step_began = self.clock()
            _, full = engine.purge_type_due(type_id, step)
            self._pace(step, full, self.clock() - step_began)
            if full:
                self.again.append(type_id)
            if self.clock() - began >= BUDGET_SECONDS:
                break
        return 0.0 if self.pending or self.again else None

    def _pace(self, step, full, seconds):
        """Size the next step by how long a ``full`` one of ``step`` tasks took (``seconds``):
        about the budget. (A step that found fewer says nothing of what a step costs.)"""
        if not full:
            return
        behind = self.clock() - self.sweep_began > conf.HEARTBEAT_INTERVAL_SECONDS
        if seconds < BUDGET_SECONDS / 2 or behind:
            self.step = min(step * 2, conf.PURGE_BATCH_SIZE)
        elif seconds > BUDGET_SECONDS:
            self.step = max(min(MIN_STEP_TASKS, step), step // 2)
