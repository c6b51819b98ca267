"""Times as the admin shows them: to the second, with the time zone's name.

Django shows a date-time field as its ``DATETIME_FORMAT`` says (by default to the
minute, "1:39 p.m."), while a task's history shows milliseconds: the admin's columns
and read-only fields of times use these instead.
"""

from django.contrib import admin

from atp.presentation import seconds_in_zone


def time_column(field, description=None, zone_of=None):
    """Return an admin column (and read-only field) showing the time ``field`` to the
    second, in the current time zone, or in the one named by ``zone_of(obj)``."""

    @admin.display(description=description or field.replace("_", " "), ordering=field)
    def column(model_admin, obj):
        value = getattr(obj, field)
        if value is None:
            return "-"
        return seconds_in_zone(value, zone_of(obj) if zone_of else None)

    return column
