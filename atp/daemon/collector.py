"""How atpd's processes use Python's cyclic garbage collector.

A supervisor's round makes thousands of short-lived objects (each claimed task, its
inputs, its state; each outcome and message), most of which their reference counts free.
At Python's default the collector ran every 700 allocations, a dozen times a round,
each time walking every object of the round still alive, and every so often everything
Django and the handlers' modules made at start-up: about 20 µs of the supervisor's CPU a
task in a drain (timed with ``gc.callbacks``), a tenth of it. So the supervisor freezes
what exists when it starts (``gc.freeze``: those objects are never walked again) and
collects after ``SUPERVISOR_ALLOCATIONS``; what only a cycle holds (a task and its
inputs refer to each other) waits a little longer to be freed: a few megabytes at most.

The workers, forked from it, keep the frozen objects as they are: a collection in a
worker no longer writes to the pages it shares with its supervisor (Python's own advice
for processes that fork without exec). They collect at Python's default thresholds,
those the process started with: a task's handler is not atpd's code to tune.
"""

import gc

#: The collector's thresholds as the process started.
DEFAULT_THRESHOLDS = gc.get_threshold()
#: Allocations (less deallocations) between two collections of the youngest generation
#: in the supervisor.
SUPERVISOR_ALLOCATIONS = 10_000


def for_supervisor():
    """Freeze the objects of start-up; collect less often from now on. Called once the
    daemon has loaded its handlers, before it forks its workers."""
    gc.freeze()
    gc.set_threshold(SUPERVISOR_ALLOCATIONS, *DEFAULT_THRESHOLDS[1:])


def for_worker():
    """Collect as a Python process does by default (the frozen objects stay frozen)."""
    gc.set_threshold(*DEFAULT_THRESHOLDS)
