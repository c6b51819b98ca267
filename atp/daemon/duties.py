"""The maintenance duties' scheduler: a table of duties, each run every so many seconds.

Besides its own work (the ends, the claims, the heartbeat, the check of its leases) a
daemon does maintenance for all: it takes on new types, reaps silent daemons, expires
pull leases, completes and seals batches, enqueues schedules' runs, purges what
retention lets go. Each is a run-once function (most of them in
``atp.daemon.maintenance``, which tests call directly); the supervisor lists them in a
table of ``Duty`` rows (``Supervisor._duties``), and one ``Duties`` runs the rows that
are due, in the table's order, from the loop's database round.

- A duty is due again ``interval`` seconds after the round it ran in; a paced one
  (``is_paced``) returns how soon it wants to run again, when sooner: a purge whose sweep
  is not done, a schedule due before the next poll.
- A duty ``after_claim`` runs after the round's claim and writes, not before: work
  that may wait a moment for the tasks' own.
- A duty not run ``while_stopping`` waits while the daemon drains.
- A duty that fails otherwise than by the connection is logged and tried again at its
  next turn (``is_contained``), or, for the daemon's own (what it runs, whom it
  reaps), ends the daemon. A lost connection leaves it due: it runs again, first thing,
  once the database is back.
"""

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from atp.daemon.outage import CONNECTION_ERRORS

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class Duty:
    """One row of the table: what the duty is (for the log), every how many seconds it
    runs, and the run-once function that does it."""

    what: str
    interval: float
    run: Callable
    is_paced: bool = False  # run() returns the seconds until it is due again, if sooner
    after_claim: bool = False
    while_stopping: bool = True
    is_contained: bool = True
    next: float = 0.0  # when it is due (monotonic); at once at first


class Duties:
    """Runs a table of ``Duty`` rows, each when due."""

    def __init__(self, duties, *, log=logger, clock=time.monotonic):
        self.duties = list(duties)
        self.log = log
        self.clock = clock
        self._soonest = 0.0

    def run_due(self, now, *, is_stopping, after_claim=False):
        """Run, in order, the duties of the round's part ``after_claim`` that are due at
        ``now`` (the round's start); raise a connection error, leaving the rest due."""
        if now < self._soonest:
            return  # most rounds: nothing is due
        try:
            for duty in self.duties:
                if (duty.after_claim is after_claim and now >= duty.next
                        and (duty.while_stopping or not is_stopping)):
                    self._run(duty, now)
        finally:
            self._soonest = min((duty.next for duty in self.duties), default=math.inf)

    def next_due(self, *, is_stopping):
        """Return when the first duty the daemon does (while stopping, if so) comes due."""
        if not is_stopping:
            return self._soonest
        return min((duty.next for duty in self.duties if duty.while_stopping), default=math.inf)

    def _run(self, duty, now):
        result = contain(duty.what, duty.run, self.log) if duty.is_contained else duty.run()
        duty.next = now + duty.interval
        if duty.is_paced and result is not None:
            duty.next = min(duty.next, self.clock() + result)


def contain(what, run, log=logger):
    """Run ``run`` and return what it returns; when it fails otherwise than by the
    connection, log it as ``what`` failing and return None: a write the database
    refused is tried again at the duty's next turn, not the end of the daemon."""
    try:
        return run()
    except CONNECTION_ERRORS:
        raise
    except Exception:
        log.exception("%s failed", what)
        return None
