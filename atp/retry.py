"""The retry policy of a task type for its handler's failures, with App Engine's semantics.

A failed attempt is retried while the type's limits allow: ``retry_limit`` (retries
done) and ``age_limit`` (time since the task first ran). With both set, a task is
retried until **both** are reached; with one, that one decides; with neither, a
failure is final (atp's default, as before retries existed).

The wait before retry ``n`` (1 for the first) starts at ``min_backoff`` and doubles
``max_doublings`` times, then grows by ``2**max_doublings * min_backoff`` per retry, and
never exceeds ``max_backoff``: with 10 s, 300 s and 3 doublings the waits are 10, 20,
40, 80, 160, 240, 300, 300 s. With ``retry_jitter`` each wait is drawn uniformly between
half of it and all of it, so that tasks that failed together do not retry together.

A handler's failure is not a daemon's: a stale or timed-out attempt is restarted
against ``max_restarts``, a separate budget.
"""

import datetime
import random
from dataclasses import dataclass

#: App Engine's defaults for the backoff; the limits default to none (no retry).
DEFAULT_MIN_BACKOFF = datetime.timedelta(seconds=0.1)
DEFAULT_MAX_BACKOFF = datetime.timedelta(hours=1)
DEFAULT_MAX_DOUBLINGS = 16


@dataclass(frozen=True)
class RetryPolicy:
    retry_limit: int | None = None
    age_limit: datetime.timedelta | None = None
    min_backoff: datetime.timedelta = DEFAULT_MIN_BACKOFF
    max_backoff: datetime.timedelta = DEFAULT_MAX_BACKOFF
    max_doublings: int = DEFAULT_MAX_DOUBLINGS
    jitter: bool = False

    @classmethod
    def of(cls, task_type):
        """Return the policy of a ``Type``."""
        return cls(task_type.retry_limit, task_type.age_limit, task_type.min_backoff,
                   task_type.max_backoff, task_type.max_doublings, task_type.retry_jitter)

    @property
    def retries(self):
        """Whether the policy retries at all."""
        return self.retry_limit is not None or self.age_limit is not None

    def allows(self, retries_done, age):
        """Return whether a task that was retried ``retries_done`` times and first ran
        ``age`` ago (a timedelta) may be retried once more."""
        count_left = self.retry_limit is not None and retries_done < self.retry_limit
        time_left = self.age_limit is not None and age < self.age_limit
        # One limit alone decides; with both, retries go on until both are reached.
        return count_left or time_left

    def backoff(self, retry, *, rand=random.random):
        """Return the wait (timedelta) before retry number ``retry`` (1 for the first)."""
        if retry < 1:
            raise ValueError(f"retries are numbered from 1, not {retry!r}")
        doublings, least = self.max_doublings, self.min_backoff.total_seconds()
        if retry <= doublings + 1:
            seconds = least * 2.0 ** (retry - 1)
        else:
            seconds = least * 2.0 ** doublings * (retry - doublings)
        seconds = min(seconds, self.max_backoff.total_seconds())
        if self.jitter:
            seconds *= 0.5 + 0.5 * rand()
        return datetime.timedelta(seconds=seconds)

    def describe(self):
        """Return the limits in words, for a history entry."""
        parts = []
        if self.retry_limit is not None:
            parts.append(f"retry_limit {self.retry_limit}")
        if self.age_limit is not None:
            parts.append(f"age_limit {self.age_limit.total_seconds():g} s")
        return " and ".join(parts) or "no retry"
