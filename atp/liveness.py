"""Whether another process still lives, judged by what this one observes.

A process shows that it lives by advancing a counter in the database: a daemon's
heartbeats, a batch block's pulse. Another process judges it dead once that counter
has not advanced for a whole time-out *on the observer's own monotonic clock*. No two
clocks are ever compared: wall clocks step (NTP, a VM's migration, the host clock that
is SQLite's database clock), a database server's clock steps too, and a stamp read
against another clock's "now" would declare a live process dead, or a dead one alive.
A monotonic clock never steps, and the observer only ever compares it with itself.

The price: an observer that has just started, or has just seen a counter for the
first time, waits a whole time-out before it may judge it.
"""

import logging
import threading
import time

logger = logging.getLogger(__name__)


class Watch:
    """Counters of other processes as this process saw them, and since when."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._seen = {}  # key -> (counter, when it was first seen at that value)

    def silent(self, counters, timeout_seconds):
        """Note ``counters`` (key -> counter, read just now); return those (key -> counter)
        that have not advanced for ``timeout_seconds`` of this watch's clock.

        A key not in ``counters`` is forgotten; one seen for the first time, or whose
        counter moved (either way: a counter reset is news too), begins its time-out now.
        """
        now = self._clock()
        seen = {}
        for key, counter in counters.items():
            before = self._seen.get(key)
            seen[key] = before if before is not None and before[0] == counter else (counter, now)
        self._seen = seen
        return {key: counter for key, (counter, since) in seen.items()
                if now - since >= timeout_seconds}


class Pulse:
    """Call ``beat()`` every ``interval_seconds`` on a thread of its own, from ``start()``
    until ``stop()``: how a process that runs no loop of its own (a ``with atp.batch()``
    block in a web request, an import script) shows that it still lives.

    A failed beat (the database busy or away) is logged and tried again at the next
    interval: a missed beat costs nothing until a whole time-out of them is missed. The
    thread closes its database connections when it stops.
    """

    def __init__(self, beat, interval_seconds, name="atp pulse"):
        self._beat = beat
        self._interval = interval_seconds
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self, wait_seconds=5.0):
        """Stop beating; wait up to ``wait_seconds`` for a beat under way to end."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(wait_seconds)

    def _run(self):
        from django.db import connections

        try:
            while not self._stopped.wait(self._interval):
                try:
                    self._beat()
                except Exception:
                    logger.warning("%s: a beat failed; trying again in %s s", self._thread.name,
                                   self._interval, exc_info=True)
        finally:
            connections.close_all()
