"""Admins of what holds the inputs of tasks to come (schedules, batches' on-complete
tasks): those inputs are seen as a task's are."""

from django.db.models.constants import LOOKUP_SEP

from atp.permissions import VIEW_INPUTS


class InputsSeenAsTasks:
    """Mixin for a ``ModelAdmin`` whose model holds inputs of tasks in ``inputs_fields``.

    They are shown only to those holding ``VIEW_INPUTS``, and never filtered on by
    anyone: a filter in the address would tell, row by row, what they hold.
    """

    inputs_fields = ("inputs",)

    def get_fields(self, request, obj=None):
        fields = super().get_fields(request, obj)
        if request.user.has_perm(VIEW_INPUTS):
            return fields
        return [name for name in fields if name not in self.inputs_fields]

    def lookup_allowed(self, lookup, value, request=None):
        if lookup.split(LOOKUP_SEP)[0] in self.inputs_fields:
            return False
        if request is None:  # Django 4.2 does not pass the request
            return super().lookup_allowed(lookup, value)
        return super().lookup_allowed(lookup, value, request)
