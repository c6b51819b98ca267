"""Admin pages addressed by a row's number: an address that cannot be one names nothing."""

from django.contrib.admin.utils import unquote

from atp.converters import parse_task_id


class NumericKeys:
    """Mixin for a ``ModelAdmin`` whose model has an integer primary key.

    ``/admin/atp/<model>/<key>/change/`` with a key too large for the column makes
    Django 4.2 on SQLite raise ``OverflowError`` (a 500); here it is simply no row,
    and the admin says so as it does for any missing one.
    """

    def get_object(self, request, object_id, from_field=None):
        if from_field is None and parse_task_id(unquote(object_id)) is None:
            return None
        return super().get_object(request, object_id, from_field)
