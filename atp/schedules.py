"""The timetables of periodic tasks: when a schedule is due, and which runs a daemon enqueues.

A schedule comes due by a cron expression (croniter's syntax: 5 fields, or 6 with
seconds last; in UTC, or in a time zone it names) or every ``interval`` (whole
seconds, counted from when the interval was set). Its ``next_run`` is the first due
time not enqueued yet. A daemon that finds it due enqueues the latest of the due
times that passed, at most ``catch_up`` of them: 1 (the default) runs it once after
any number of missed due times, as Celery's beat does; 0 runs none that is more than
``ATP_SCHEDULE_GRACE_SECONDS`` late, as Oban's Cron.

Nothing here touches the database: ``plan`` is a pure function of the timetable, the
schedule's ``next_run`` and the clock, so that tests need neither a daemon nor a sleep;
a schedule declared while Django starts (``atp.schedule`` in an app's ``tasks`` module,
before any table may exist) is recorded here (``declare``), and written by
``atp.engine.schedules.sync_declared_schedules`` after ``migrate`` and as atpd starts.
"""

import datetime
import re
import zoneinfo
from dataclasses import dataclass

from croniter import CroniterError, croniter

from atp.exceptions import InvalidParameter
from atp.serialization import check_text

NAME_MAX_LENGTH = 100
NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]+")
CRON_MAX_LENGTH = 255
TIMEZONE_MAX_LENGTH = 64
#: The most runs a schedule may enqueue at once after missed due times.
CATCH_UP_MAX = 1000
#: Shorter intervals make no sense for a queue of tasks that run 10 s and more.
INTERVAL_MIN = datetime.timedelta(seconds=1)
INTERVAL_MAX = datetime.timedelta(days=36500)
#: A cron field croniter fills with a random value (``R``, ``R(0-30)``, ``R/5``): each
#: daemon would draw its own, so a schedule would have no due times daemons agree on.
RANDOM_FIELD = re.compile(r"^r(\(\d+-\d+\))?(/\d+)?$", re.IGNORECASE)
#: How a task identifier names a due time (always UTC, to the second).
DUE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
UTC = datetime.UTC
_TINY = datetime.timedelta(microseconds=1)

#: The schedules declared while Django started, by name: ``atp.schedule``'s arguments.
_declarations = {}


def declare(name, arguments):
    """Record schedule ``name`` as declared in code with ``arguments`` (those of
    ``atp.schedule``, checked as far as they can be without the database)."""
    _declarations[name] = dict(arguments)


def declarations():
    """Return the schedules declared while Django started: ``{name: arguments}``."""
    return {name: dict(arguments) for name, arguments in _declarations.items()}


def forget_declarations():
    """Forget every declaration (for tests)."""
    _declarations.clear()


def clean_name(name):
    """Return a valid schedule name; raise ``InvalidParameter``."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise InvalidParameter(
            f"a schedule name is made of letters, digits, '_' and '-', not {name!r}")
    if len(name) > NAME_MAX_LENGTH:
        raise InvalidParameter(f"a schedule name has at most {NAME_MAX_LENGTH} characters")
    return name


def clean_catch_up(catch_up):
    """Return a valid ``catch_up``; raise ``InvalidParameter``."""
    if isinstance(catch_up, bool) or not isinstance(catch_up, int) or not (
            0 <= catch_up <= CATCH_UP_MAX):
        raise InvalidParameter(
            f"catch_up must be an integer from 0 to {CATCH_UP_MAX}, not {catch_up!r}")
    return catch_up


@dataclass(frozen=True)
class Timetable:
    """When a schedule comes due: by ``cron`` (in ``timezone``, empty for UTC) or every
    ``interval``. Build it with ``Timetable.clean``."""

    cron: str = ""
    interval: datetime.timedelta | None = None
    timezone: str = ""

    @classmethod
    def clean(cls, cron=None, interval=None, timezone=None):
        """Return the timetable of exactly one of ``cron`` and ``interval`` (seconds or a
        ``timedelta``); raise ``InvalidParameter``."""
        cron = cron or ""
        if (not cron) == (interval is None):
            raise InvalidParameter("give a schedule either a cron expression or an interval, "
                                   "not both and not neither")
        timezone = timezone or ""
        if interval is not None:
            if timezone:
                raise InvalidParameter("a time zone applies to a cron expression, not to "
                                       "an interval")
            return cls(interval=_clean_interval(interval))
        return cls(cron=_clean_cron(cron), timezone=_clean_timezone(timezone))

    def __str__(self):
        if self.interval is not None:
            return f"every {describe_interval(self.interval)}"
        return f"{self.cron} ({self.timezone or 'UTC'})"

    def first_after(self, moment):
        """Return the first due time after ``moment`` for a timetable set at ``moment``
        (an interval counts from the second it was set)."""
        if self.interval is not None:
            return moment.replace(microsecond=0) + self.interval
        return _utc(self._cron(moment).get_next(datetime.datetime))

    def due_times(self, since, until, count):
        """Return the latest ``count + 1`` due times from ``since`` to ``until`` (both
        included), or fewer when the range holds fewer, newest first."""
        if until < since:
            return []
        if self.interval is not None:
            last = since + (until - since) // self.interval * self.interval
            times = (last - k * self.interval for k in range(count + 1))
            return [due for due in times if due >= since]
        times = []
        iterator = self._cron(until + _TINY)  # get_prev is strictly before its start
        while len(times) <= count:
            due = _utc(iterator.get_prev(datetime.datetime))
            if due < since:
                break
            times.append(due)
        return times

    def next_after(self, since, moment):
        """Return the first due time after ``moment`` of the series that runs from ``since``."""
        if self.interval is not None:
            if moment < since:
                return since
            return since + ((moment - since) // self.interval + 1) * self.interval
        return _utc(self._cron(moment).get_next(datetime.datetime))

    def _cron(self, moment):
        zone = zoneinfo.ZoneInfo(self.timezone) if self.timezone else UTC
        return croniter(self.cron, moment.astimezone(zone))


@dataclass(frozen=True)
class Plan:
    """What a daemon does with a due schedule: enqueue the ``runs`` (due times, oldest
    first), and move ``next_run`` to the first due time after now. ``skipped`` is None,
    or the first and last of the due times that passed and are not run."""

    runs: tuple
    skipped: tuple | None
    next_run: datetime.datetime


def plan(timetable, next_run, now, catch_up, grace):
    """Return the ``Plan`` of a schedule due at ``next_run`` as found at ``now``.

    ``catch_up`` runs at most are enqueued, the latest; with 0, only a run less than
    ``grace`` (a ``timedelta``) late. Raise ``InvalidParameter`` for a timetable
    croniter refuses (a row written around atp's checks).
    """
    try:
        latest = timetable.due_times(next_run, now, max(catch_up, 1))
        following = timetable.next_after(next_run, now)
    except (CroniterError, ValueError, TypeError, KeyError) as exc:
        raise InvalidParameter(f"the timetable {timetable} cannot be read: {exc}") from exc
    runs = latest[:max(catch_up, 1)]
    if catch_up == 0 and runs and now - runs[0] > grace:
        runs = []
    left = latest[len(runs):]
    skipped = (next_run, left[0]) if left else None
    return Plan(tuple(reversed(runs)), skipped, following)


def run_identifier(name, due):
    """Return the identifier of the task a schedule enqueues for its run due at ``due``."""
    return f"sched-{name}-{due.astimezone(UTC).strftime(DUE_TIME_FORMAT)}"


def describe_interval(interval):
    """Return an interval as an operator reads it (``90 s``, ``2 h``, ``1 day``)."""
    seconds = int(interval.total_seconds())
    for unit, size in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'s' if unit == 'day' and count > 1 else ''}"
    return f"{seconds} s"


def _utc(moment):
    # croniter may hand back a time marked as the second of an ambiguous pair (fold=1),
    # which means nothing in UTC.
    return moment.astimezone(UTC).replace(fold=0)


def _clean_interval(interval):
    given = interval
    if isinstance(interval, (int, float)) and not isinstance(interval, bool):
        try:
            interval = datetime.timedelta(seconds=interval)
        except (OverflowError, ValueError):
            interval = None
    if (not isinstance(interval, datetime.timedelta)
            or not INTERVAL_MIN <= interval <= INTERVAL_MAX or interval.microseconds):
        raise InvalidParameter(
            f"every must be a whole number of seconds (or a timedelta) from 1 s to "
            f"{INTERVAL_MAX.days} days, not {given!r}")
    return interval


def _clean_cron(cron):
    check_text(cron, "a cron expression")
    cron = " ".join(cron.split())
    if len(cron) > CRON_MAX_LENGTH:
        raise InvalidParameter(f"a cron expression has at most {CRON_MAX_LENGTH} characters")
    if any(RANDOM_FIELD.match(field) for field in cron.split()):
        raise InvalidParameter(f"cron expression {cron!r}: random fields (R) are not supported")
    try:
        croniter(cron, datetime.datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime.datetime)
    except (CroniterError, ValueError, TypeError, KeyError) as exc:
        # TypeError: a hashed field (H) without the id croniter hashes.
        raise InvalidParameter(f"{cron!r} is not a valid cron expression: {exc}") from None
    return cron


def _clean_timezone(timezone):
    if not timezone:
        return ""
    check_text(timezone, "a time zone")
    try:
        zoneinfo.ZoneInfo(timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise InvalidParameter(f"{timezone!r} is not a time zone name such as "
                               "'Europe/Paris'") from None
    if len(timezone) > TIMEZONE_MAX_LENGTH:
        raise InvalidParameter(f"a time zone name has at most {TIMEZONE_MAX_LENGTH} characters")
    return timezone
