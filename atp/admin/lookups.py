"""The admin's lists asked for odd addresses: a filter value no column can hold is a 400.

Django's admin turns the query string into filters and lets the database judge the
values: PostgreSQL refuses a NUL character in any string, SQLite an integer past 64
bits, Python a date past year 9999, and each of those was a 500. Here every value of
every filter of a list (the dropdowns, the date hierarchy, hand-written lookups) is
checked against the column it is compared with before the list is read, and an
address the list cannot use answers 400 instead of Django's redirect to ``?e=1``.
"""

import datetime

from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import BadRequest, EmptyResultSet
from django.db import connections, models
from django.db.models.lookups import Lookup
from django.db.models.sql.where import WhereNode

#: The integers an expression's column holds when the database names no narrower range.
BIGINT_RANGE = (-(2 ** 63), 2 ** 63 - 1)


class CheckedChangeList(ChangeList):
    """A ``ChangeList`` that refuses (``IncorrectLookupParameters``) the values its
    columns cannot hold, before any row is read."""

    def get_filters(self, request):
        for name, given in self.get_filters_params().items():
            # Django 5 gives each parameter's values as a list, 4.2 its last value.
            if any("\x00" in value for value in ([given] if isinstance(given, str) else given)):
                raise IncorrectLookupParameters(f"{name} holds a NUL character")
        try:
            return super().get_filters(request)
        except (ValueError, OverflowError) as exc:
            # The date hierarchy's arithmetic (year 9999 has no following year).
            raise IncorrectLookupParameters(exc) from exc

    def get_queryset(self, request, *args, **kwargs):
        # (Django 5 passes exclude_parameters, for facets; 4.2 nothing more.)
        queryset = super().get_queryset(request, *args, **kwargs)
        reason = unusable_value(queryset)
        if reason is not None:
            raise IncorrectLookupParameters(reason)
        return queryset


class CheckedLookups:
    """Mixin for every ``ModelAdmin`` of atp: its list answers 400 to an address whose
    filters it cannot use (Django would redirect to the bare list with ``?e=1``)."""

    def get_changelist(self, request, **kwargs):
        return CheckedChangeList

    def get_changelist_instance(self, request):
        try:
            return super().get_changelist_instance(request)
        except IncorrectLookupParameters as exc:
            raise BadRequest(f"this list cannot be filtered so: {exc}") from exc


def unusable_value(queryset):
    """Return why a filter of ``queryset`` compares a column with a value it cannot hold,
    or ``None`` when every value is usable (an empty result is a usable one)."""
    connection = connections[queryset.db]
    for lookup in _lookups(queryset.query.where):
        for value in _values(lookup):
            reason = _refusal(lookup.lhs.output_field, value, connection)
            if reason is not None:
                return f"{value!r} {reason}"
    try:
        # Some values fail only once turned into SQL: year 10000, a local time before
        # year 1 in UTC.
        queryset.query.get_compiler(queryset.db).as_sql()
    except EmptyResultSet:
        return None
    except (ValueError, OverflowError) as exc:
        return str(exc)
    return None


def _lookups(node):
    for child in node.children:
        if isinstance(child, WhereNode):
            yield from _lookups(child)
        elif isinstance(child, Lookup):
            yield child


def _values(lookup):
    if not lookup.rhs_is_direct_value():
        return []
    value = lookup.rhs
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        return [value]
    return list(value)  # __in, __range


def _refusal(field, value, connection):
    if isinstance(value, str) and "\x00" in value:
        return "holds a NUL character, which no column holds"
    while field.is_relation:
        field = field.target_field
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            low, high = connection.ops.integer_field_range(field.get_internal_type())
        except KeyError:  # not a column's own type
            low, high = BIGINT_RANGE
        # Django 4.2 names no range on SQLite, which holds 64 bits.
        low, high = (BIGINT_RANGE[0] if low is None else low,
                     BIGINT_RANGE[1] if high is None else high)
        if not low <= value <= high:
            return "is beyond the range of its column"
    if isinstance(field, models.DurationField) and not isinstance(value, datetime.timedelta):
        return "is not a duration"  # the admin passes it on as text
    return None
