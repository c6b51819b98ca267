"""Recognising a process of this host by what does not move when the wall clock does.

A daemon records who it is when it registers: its host's boot id (Linux's
``/proc/sys/kernel/random/boot_id``, new at every boot), its PID namespace, its pid,
and the clock ticks since boot at which the kernel started it. A daemon starting later
under the same host name compares them with what it sees to tell whether that earlier
daemon's process still runs, and restarts its tasks at once if it does not.

psutil's ``create_time()`` is not used for this: it adds those ticks to the boot time
in wall-clock seconds, which moves when the wall clock is stepped, so a live daemon
could be taken for a dead one. And a host name proves little: containers on a host's
network often share its name, and a pid means nothing in another PID namespace or
after a reboot. What cannot be compared is never taken for gone.
"""

import enum
import os
from dataclasses import dataclass
from pathlib import Path

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
#: Field 22 of /proc/<pid>/stat, counted after the command name's closing parenthesis.
START_TICKS_FIELD = 19


class Seen(enum.Enum):
    """What this process can tell of a process recorded elsewhere under its host name."""

    RUNNING = "running"
    GONE = "gone"
    ELSEWHERE = "elsewhere"  # another boot, or another PID namespace: cannot tell


@dataclass(frozen=True)
class ProcessIdentity:
    """Who a process is on its host; empty fields where the platform cannot tell."""

    boot_id: str
    pid_namespace: str
    pid: int
    start_ticks: int = None

    @property
    def is_comparable(self):
        return bool(self.boot_id and self.pid_namespace and self.start_ticks is not None)


def current():
    """Return the identity of the calling process."""
    pid = os.getpid()
    return ProcessIdentity(boot_id(), pid_namespace(), pid, start_ticks(pid))


def boot_id():
    """Return this host's boot id, or "" where there is none (not Linux)."""
    try:
        return BOOT_ID_PATH.read_text().strip()
    except OSError:
        return ""


def pid_namespace():
    """Return the calling process's PID namespace (``pid:[4026531836]``), or ""."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def start_ticks(pid):
    """Return when process ``pid`` started, in clock ticks since boot; None if it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    # The command name may hold spaces and parentheses: count fields after the last ")".
    fields = stat.rpartition(")")[2].split()
    return int(fields[START_TICKS_FIELD])


def see(recorded):
    """Return whether the process ``recorded`` (a ``ProcessIdentity``) runs, as seen from here."""
    mine = current()
    if not (recorded.is_comparable and mine.is_comparable):
        return Seen.ELSEWHERE
    if (recorded.boot_id, recorded.pid_namespace) != (mine.boot_id, mine.pid_namespace):
        return Seen.ELSEWHERE
    # A pid reused by another process started at another tick.
    if start_ticks(recorded.pid) == recorded.start_ticks:
        return Seen.RUNNING
    return Seen.GONE
