"""How one atpd runs: its command-line options, checked, with defaults from settings."""

from dataclasses import dataclass

import psutil

from atp.conf import conf
from atp.exceptions import InvalidParameter


def default_workers():
    """Return the default pool size: one worker per CPU."""
    return psutil.cpu_count(logical=True) or 1


DEFAULT_PREFETCH = 256


@dataclass(frozen=True)
class DaemonConfig:
    """The options of one daemon run; raise ``InvalidParameter`` for a bad one."""

    workers: int
    types: tuple[str, ...] | None = None
    burst: bool = False
    max_tasks_per_child: int | None = None
    max_memory_per_child_mb: int | None = None
    shutdown_timeout: float | None = None
    poll_interval: float | None = None
    #: The most tasks queued behind each worker's running one (see ``atp.daemon.prefetch``).
    prefetch: int = DEFAULT_PREFETCH

    def __post_init__(self):
        for name in ("workers", "max_tasks_per_child", "max_memory_per_child_mb"):
            value = getattr(self, name)
            if value is None and name != "workers":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidParameter(f"{name} must be a positive integer, not {value!r}")
        if isinstance(self.prefetch, bool) or not isinstance(self.prefetch, int) or self.prefetch < 0:
            raise InvalidParameter(f"prefetch must be a non-negative integer, not {self.prefetch!r}")
        if self.shutdown_timeout is None:
            object.__setattr__(self, "shutdown_timeout", conf.SHUTDOWN_TIMEOUT_SECONDS)
        if self.poll_interval is None:
            object.__setattr__(self, "poll_interval", conf.POLL_INTERVAL_SECONDS)
        if self.shutdown_timeout < 0:
            raise InvalidParameter("shutdown_timeout must not be negative")
        if self.poll_interval <= 0:
            raise InvalidParameter("poll_interval must be positive")
        if self.types is not None:
            types = tuple(t.strip() for t in self.types if t.strip())
            if not types:
                raise InvalidParameter("types must name at least one task type")
            object.__setattr__(self, "types", types)
