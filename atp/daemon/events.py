"""What the supervisor's loop waits for besides its workers: timers and signals."""

import signal
import socket


class Every:
    """A timer for something done every ``interval`` seconds; due at once at first."""

    def __init__(self, interval):
        self.interval = interval
        self.next = 0.0

    def is_due(self, now):
        return now >= self.next

    def done(self, now):
        self.next = now + self.interval


class SignalInbox:
    """SIGTERM and SIGINT as events the main loop can wait for."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __enter__(self):
        self._read, self._write = socket.socketpair()
        self._read.setblocking(False)
        self._write.setblocking(False)
        self._received = []
        self._previous_fd = signal.set_wakeup_fd(self._write.fileno())
        self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc_info):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(self._previous_fd)
        self._read.close()
        self._write.close()

    def _handle(self, signum, frame):
        self._received.append(signum)

    def fileno(self):
        return self._read.fileno()

    def filenos(self):
        """Return both ends' descriptors (a forked worker closes them)."""
        return [self._read.fileno(), self._write.fileno()]

    def take(self):
        """Return the signals received since the last call."""
        try:
            while self._read.recv(4096):
                pass
        except BlockingIOError:
            pass
        received, self._received = self._received, []
        return received
