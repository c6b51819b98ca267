"""The admin of batches (``atp.batch``): their progress, read only."""

from django.contrib import admin
from django.db.models import Count, Q
from django.urls import reverse
from django.utils.html import format_html

from atp.admin.inputs import InputsSeenAsTasks
from atp.admin.keys import NumericKeys
from atp.admin.lookups import CheckedLookups
from atp.admin.paginators import no_facets
from atp.admin.times import time_column
from atp.models import Batch
from atp.states import LIVE, TERMINAL, Status


def _at_completion(field, description, members):
    """The members' ends counted at completion; while open, those known so far."""

    @admin.display(description=description)
    def shown(self, batch):
        if batch.completed is not None:
            return getattr(batch, field)
        return f"{getattr(batch, members)} so far (open: counted when it completes)"

    return shown


@no_facets
@admin.register(Batch)
class BatchAdmin(InputsSeenAsTasks, CheckedLookups, NumericKeys, admin.ModelAdmin):
    list_display = ["__str__", "on_complete", "progress", "failed_members", "created_shown",
                    "completed_shown", "completion_link"]
    list_filter = [("completed", admin.EmptyFieldListFilter)]
    search_fields = ["name", "on_complete"]
    readonly_fields = ["name", "on_complete", "function", "inputs", "created_shown",
                       "sealed_shown", "progress", "failed_members", "completed_shown",
                       "completion_link", "total_shown", "finished_shown", "failed_shown",
                       "cancelled_shown"]
    fields = readonly_fields
    # The function a deferred on-complete task calls is part of its inputs.
    inputs_fields = ("function", "inputs")

    created_shown = time_column("created")
    sealed_shown = time_column("sealed")
    completed_shown = time_column("completed")

    class Media:
        css = {"all": ["atp/atp.css"]}

    def get_queryset(self, request):
        # The members by state, counted for the rows of the page only.
        return super().get_queryset(request).annotate(
            members_total=Count("members"),
            members_ended=Count("members", filter=Q(members__status__in=TERMINAL)),
            members_failed=Count("members", filter=Q(members__status=Status.FAILED)),
            members_finished=Count("members", filter=Q(members__status=Status.FINISHED)),
            members_cancelled=Count("members", filter=Q(members__status=Status.CANCELLED)),
            members_live=Count("members", filter=Q(members__status__in=LIVE)),
        )

    @admin.display(description="done")
    def progress(self, batch):
        """Ended members of all, as a bar: ``37 / 100``."""
        total, ended = batch.members_total, batch.members_ended
        share = 100 if not total else round(100 * ended / total)
        state = (" (being enqueued)" if not batch.sealed
                 else "" if batch.completed else " (open)")
        return format_html(
            '<progress class="atp-progress" max="100" value="{}"></progress> {} / {}{}',
            share, ended, total, state)

    @admin.display(description="failed, cancelled")
    def failed_members(self, batch):
        return f"{batch.members_failed}, {batch.members_cancelled}"

    total_shown = _at_completion("total", "total", "members_total")
    finished_shown = _at_completion("finished", "finished", "members_finished")
    failed_shown = _at_completion("failed", "failed", "members_failed")
    cancelled_shown = _at_completion("cancelled", "cancelled", "members_cancelled")

    @admin.display(description="on-complete task")
    def completion_link(self, batch):
        if batch.completion_id is None:
            return "-"
        url = reverse("admin:atp_instance_change", args=[batch.completion_id])
        return format_html('<a href="{}">#{}</a>', url, batch.completion_id)

    def has_add_permission(self, request):
        return False  # batches are made by atp.batch

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
