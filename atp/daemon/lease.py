"""How long this daemon may keep running its tasks without a successful heartbeat.

Another daemon restarts our tasks once it has seen our heartbeat counter stand still
for ``ATP_DAEMON_TIMEOUT_SECONDS`` on its own monotonic clock (``atp.liveness``), a
time-out that begins after the database counted our last heartbeat. Our lease ends
earlier, by the kill grace and one heartbeat interval, measured from the moment the
last successful heartbeat was *sent* (before the database counted it). When the lease ends
our workers are killed, so a task never runs here and elsewhere at the same time.

The deadline lives in shared memory on a clock a parent and its forked children
share, so a worker whose lease ran out ends itself, even when its supervisor is stuck
or frozen. The clock is Linux's boot-time clock, which keeps counting while the
machine is suspended (the monotonic clock does not, and other daemons' clocks do).
"""

import time

from atp.conf import conf

_CLOCK = getattr(time, "CLOCK_BOOTTIME", None)


def clock():
    """Return seconds on the lease clock."""
    if _CLOCK is None:
        return time.monotonic()
    return time.clock_gettime(_CLOCK)


def lease_seconds():
    """Return how long a successful heartbeat keeps the lease."""
    return (
        conf.DAEMON_TIMEOUT_SECONDS - conf.WORKER_KILL_GRACE_SECONDS
        - conf.HEARTBEAT_INTERVAL_SECONDS
    )


class Lease:
    """The lease deadline, shared with the workers."""

    def __init__(self, context):
        self.deadline = context.Value("d", 0.0, lock=False)

    def renew(self, heartbeat_sent):
        """Extend the lease after a heartbeat sent at ``clock()`` time ``heartbeat_sent`` succeeded."""
        self.deadline.value = heartbeat_sent + lease_seconds()

    def remaining(self):
        """Return the seconds left (negative once it ran out)."""
        return self.deadline.value - clock()

    def is_expired(self):
        return self.remaining() < 0
