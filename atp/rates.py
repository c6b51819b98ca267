"""Flow control: a task type's start rate, as App Engine's token bucket.

A type with a ``rate`` has a bucket of ``bucket_size`` tokens (5 by default, App
Engine's), full at first. It refills continuously at ``rate`` tokens a second, never
above its size; each task a claim takes (on any daemon) takes a token, and a claim
takes no more tasks of the type than whole tokens are in the bucket. So after a quiet
spell up to ``bucket_size`` tasks start at once, and over time no more than ``rate``
a second. The bucket is two columns of the type's row (``tokens`` at ``tokens_at``),
read and written by the claims under the type's lock, in the database: it holds for
every daemon together. This module has the arithmetic; the engines apply it (on
PostgreSQL in SQL, the same formula).
"""

import math
import re

from atp.exceptions import InvalidParameter

DEFAULT_BUCKET_SIZE = 5

#: Seconds per unit of a rate written as ``"<count>/<unit>"``.
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: More than this many starts a second is no limit at all.
RATE_MAX = 1_000_000.0
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*/\s*([smhd])\s*")


def parse_rate(name, value):
    """Return ``value`` (``"5/s"``, ``"20/m"``, ``"100/h"``, ``"1/d"``, or a number of
    starts a second) as starts a second; None stays None. Raise ``InvalidParameter``."""
    if value is None:
        return None
    given = value
    if isinstance(value, str):
        match = _RATE.fullmatch(value)
        value = float(match[1]) / UNITS[match[2]] if match else None
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        value = None
    if value is None or not math.isfinite(value) or not 0 < value <= RATE_MAX:
        raise InvalidParameter(
            f"{name} must be a number of starts per second (more than 0, at most "
            f"{RATE_MAX:,.0f}) or a string such as \"5/s\", \"20/m\", \"100/h\", \"1/d\", "
            f"not {given!r}")
    return float(value)


def format_rate(rate):
    """Return a rate in starts a second as the shortest of ``"5/s"``, ``"20/m"``... it equals."""
    if rate is None:
        return ""
    for unit, seconds in UNITS.items():
        count = rate * seconds
        if count >= 1 and abs(count - round(count)) < 1e-9:
            return f"{round(count)}/{unit}"
    return f"{rate:g}/s"


def tokens_now(rate, bucket_size, tokens, tokens_at, now):
    """Return the tokens in a bucket that held ``tokens`` at ``tokens_at`` (None: full) at
    ``now``: refilled at ``rate`` a second since, at most ``bucket_size``."""
    size = bucket_size or DEFAULT_BUCKET_SIZE
    if tokens is None or tokens_at is None:
        return float(size)
    elapsed = max(0.0, (now - tokens_at).total_seconds())
    return min(float(size), tokens + rate * elapsed)


def seconds_to_token(rate, tokens):
    """Return how long a bucket holding ``tokens`` takes to hold a whole one."""
    return 0.0 if tokens >= 1 else (1 - tokens) / rate
