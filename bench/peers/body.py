"""The no-op body every system runs, and the reading of what it recorded.

The body writes one line per run to a file of its own process in the directory
``ATP_PEERS_RECORDS`` names: the task's number, then ``time.time()`` when it started and
when it ended. Every system's times come from the same clock of the same host, and the
enqueuer reads the same clock, so that enqueue -> start means the same for all.
"""

import os
import time
from pathlib import Path

RECORDS_ENV = "ATP_PEERS_RECORDS"

_sink = None
_sink_pid = None


def record(number):
    """Run the no-op task ``number``: record its start and end."""
    started = time.time()
    ended = time.time()
    _open_sink().write(f"{int(number)} {started:.6f} {ended:.6f}\n")


def _open_sink():
    global _sink, _sink_pid
    # Pools fork their workers after the module is imported: a file per process, opened
    # in the process that writes, so that no two processes interleave their lines.
    if _sink_pid != os.getpid():
        directory = Path(os.environ[RECORDS_ENV])
        _sink = open(directory / f"{os.getpid()}.rec", "a", buffering=1)
        _sink_pid = os.getpid()
    return _sink


class Records:
    """What the bodies recorded in ``directory``: read it again as it grows."""

    def __init__(self, directory):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.runs = {}  # number -> (started, ended) of its first run
        self.repeated = 0  # runs of a number that had run already
        self._offsets = {}
        self._tails = {}

    def read(self):
        """Read what was written since the last call; return how many numbers ran."""
        for path in self.directory.glob("*.rec"):
            with open(path, "rb") as file:
                file.seek(self._offsets.get(path, 0))
                chunk = self._tails.pop(path, b"") + file.read()
                self._offsets[path] = file.tell()
            lines = chunk.split(b"\n")
            if lines[-1]:
                self._tails[path] = lines[-1]  # a line being written: read it next time
            for line in lines[:-1]:
                number, started, ended = line.split()
                if int(number) in self.runs:
                    self.repeated += 1
                else:
                    self.runs[int(number)] = (float(started), float(ended))
        return len(self.runs)

    def wait_for(self, count, timeout, poll=0.05):
        """Read until ``count`` numbers ran; raise TimeoutError after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while self.read() < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self.runs)} of {count} tasks ran in {timeout:.0f} s")
            time.sleep(poll)
