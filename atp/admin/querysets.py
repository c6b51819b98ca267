"""A queryset for the task list whose date hierarchy reads an index, not a million rows."""

import calendar
import datetime

from django.db import connections
from django.db.models import Max, Min, QuerySet
from django.utils import timezone

#: Past this many periods, probing each one would cost more than reading the rows.
MAX_PROBES = 400


class DateProbingQuerySet(QuerySet):
    """``datetimes()`` answered by one index probe per candidate period.

    The admin's date hierarchy lists the years, months or days that have tasks with
    ``SELECT DISTINCT date_trunc(...)``, which reads every row. Here the first and last
    time come from the index, and each period between them is asked whether it has a
    row (``EXISTS``, an index range probe): a dozen probes instead of a million rows.
    Periods are local time, computed here: the database is only asked for ranges of
    UTC times, so it needs no time-zone tables (MariaDB and MySQL have none loaded
    unless ``mysql_tzinfo_to_sql`` was run).
    """

    def aggregate(self, *args, **kwargs):
        # The date hierarchy asks for the first and last time, then datetimes() needs
        # them again: on a large filtered table that is the costly query, run once.
        key = (repr(args), repr(sorted(kwargs.items())))
        remembered = self.__dict__.setdefault("_atp_aggregates", {})
        if key not in remembered:
            remembered[key] = super().aggregate(*args, **kwargs)
        return dict(remembered[key])

    def datetimes(self, field_name, kind, order="ASC", tzinfo=None, **kwargs):
        if kind not in ("year", "month", "day") or tzinfo is not None or kwargs:
            return super().datetimes(field_name, kind, order, tzinfo, **kwargs)
        bounds = self.aggregate(first=Min(field_name), last=Max(field_name))
        if bounds["first"] is None:
            return []
        first = timezone.localtime(bounds["first"])
        periods = list(_periods(first, timezone.localtime(bounds["last"]), kind))
        if len(periods) <= MAX_PROBES:
            found = [start for start, end in periods if self._has_row(field_name, start, end)]
        elif connections[self.db].features.has_zoneinfo_database:  # one pass over the rows
            return list(super().datetimes(field_name, kind, order, tzinfo))
        else:
            found = list(self._walk(field_name, first, kind))
        return found if order == "ASC" else found[::-1]

    def _walk(self, field_name, first, kind):
        """Yield the start of each period with a row from ``first``'s on: one probe per
        period found, for the first row past the end of the last."""
        start = _truncate(first, kind)
        while start is not None:
            yield start
            later = (self.filter(**{f"{field_name}__gte": _following(start, kind)})
                     .order_by(field_name).values_list(field_name, flat=True)[:1])
            start = next((_truncate(timezone.localtime(moment), kind) for moment in later), None)

    def _has_row(self, field_name, start, end):
        # Ordered by the field, the probe reads its index from ``start``; a bare EXISTS
        # lets PostgreSQL scan the table when it expects many matches.
        period = self.filter(**{f"{field_name}__gte": start, f"{field_name}__lt": end})
        return bool(period.order_by(field_name).values_list(field_name, flat=True)[:1])


def _periods(first, last, kind):
    """Yield ``(start, end)`` of each year, month or day from ``first`` to ``last``, local time."""
    start = _truncate(first, kind)
    while start <= last:
        end = _following(start, kind)
        yield start, end
        start = end


def _truncate(moment, kind):
    day = moment.date()
    if kind == "year":
        day = day.replace(month=1, day=1)
    elif kind == "month":
        day = day.replace(day=1)
    return timezone.make_aware(datetime.datetime.combine(day, datetime.time()))


def _following(start, kind):
    day = start.date()
    if kind == "year":
        day = day.replace(year=day.year + 1)
    elif kind == "month":
        day += datetime.timedelta(days=calendar.monthrange(day.year, day.month)[1])
    else:
        day += datetime.timedelta(days=1)
    return timezone.make_aware(datetime.datetime.combine(day, datetime.time()))
