"""Whether the queue can make progress, for load balancers and orchestrators.

Healthy: the database answers, and every type with runnable tasks waiting has a live
daemon that runs it (``atp.stats``' rule of a live daemon). The figures that come with
the answer (live daemons, runnable tasks, the longest wait) are what an autoscaler needs.
"""

import logging
from dataclasses import dataclass, field

from django.db import DatabaseError, router

from atp import stats
from atp.db import database_now
from atp.models import Task

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Health:
    """What a health probe reports: ``problems`` is empty when all is well."""

    problems: tuple = ()
    daemons: int = None
    runnable: int = None
    oldest_wait_seconds: float = None
    unserved: dict = field(default_factory=dict)

    @property
    def is_healthy(self):
        return not self.problems

    def as_json(self):
        """Return the probe's answer as a JSON-ready dict."""
        figures = {"status": "ok" if self.is_healthy else "unhealthy"}
        if self.problems:
            figures["problems"] = list(self.problems)
        if self.daemons is not None:
            figures.update(daemons=self.daemons, runnable=self.runnable,
                           oldest_wait_seconds=self.oldest_wait_seconds,
                           unserved_types=self.unserved)
        return figures


def check_health():
    """Return the queue's ``Health``; a database that does not answer makes it unhealthy."""
    try:
        return _observe()
    except DatabaseError:
        logger.exception("Health check: the database does not answer")
        return Health(problems=("the database does not answer",))


def _observe():
    # What no daemon would claim (pull types wait for consumers, paused types for an
    # operator) is left out: an autoscaler must not add daemons for it.
    runnable = stats.claimable(stats.waiting_by_type())
    unserved = {t.identifier: t.runnable for t in stats.unserved_types(runnable)}
    oldest = min((figures.oldest_since for figures in runnable.values()), default=None)
    oldest_wait = 0.0
    if oldest is not None:
        now = database_now(router.db_for_read(Task))
        oldest_wait = max((now - oldest).total_seconds(), 0.0)
    problems = tuple(f"no live daemon runs type {identifier!r} ({count} runnable tasks waiting)"
                     for identifier, count in unserved.items())
    return Health(problems, daemons=stats.live_daemon_totals().daemons,
                  runnable=sum(figures.runnable for figures in runnable.values()),
                  oldest_wait_seconds=round(oldest_wait, 3), unserved=unserved)
