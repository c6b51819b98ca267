"""Read-only admins of the other models: history, queue, inputs, responses, daemons."""

from django.contrib import admin
from django.db.models.functions import Substr
from django.utils.text import Truncator

from atp.admin.dropdowns import ChoiceDropdown
from atp.admin.keys import NumericKeys
from atp.admin.lookups import CheckedLookups
from atp.admin.paginators import EstimatedCountPaginator, no_facets
from atp.admin.times import time_column
from atp.db import ByteLength
from atp.models import Daemon, Inputs, LogRecord, Response, Task
from atp.templatetags.atp import status_badge

#: The list shows this much of each history message.
EXCERPT_CHARS = 80


@no_facets
class ReadOnlyAdmin(CheckedLookups, NumericKeys, admin.ModelAdmin):
    """Show everything, change nothing: these rows change through the queue verbs."""

    paginator = EstimatedCountPaginator
    show_full_result_count = False
    list_per_page = 50
    sortable_by = []

    class Media:
        css = {"all": ["atp/atp.css"]}

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(LogRecord)
class LogRecordAdmin(ReadOnlyAdmin):
    list_display = ["id", "instance", "time_shown", "state", "attempt", "daemon", "actor", "excerpt"]
    list_filter = [("status", ChoiceDropdown)]
    raw_id_fields = ["instance"]
    ordering = ["-id"]
    fields = ["instance", "time_shown", "status", "attempt", "daemon", "actor", "message"]
    readonly_fields = fields
    time_shown = time_column("time")

    @admin.display(description="state")
    def state(self, obj):
        return status_badge(obj.status)

    @admin.display(description="message")
    def excerpt(self, obj):
        return Truncator(obj.message_start).chars(EXCERPT_CHARS)

    def get_queryset(self, request):
        # A traceback can be long: the list fetches only the start of each message.
        return (super().get_queryset(request).select_related("instance").defer("message")
                .annotate(message_start=Substr("message", 1, EXCERPT_CHARS + 1)))


@admin.register(Task)
class TaskAdmin(ReadOnlyAdmin):
    list_display = ["instance", "type", "identifier", "priority", "not_before_shown", "daemon",
                    "claimed_shown", "deadline_shown", "paused_since_shown"]
    not_before_shown = time_column("not_before", "runnable from")
    claimed_shown = time_column("claimed")
    deadline_shown = time_column("deadline")
    paused_since_shown = time_column("paused_since")
    list_select_related = ["instance", "type", "daemon"]
    ordering = ["-priority", "not_before"]


@admin.register(Inputs)
class InputsAdmin(ReadOnlyAdmin):
    list_display = ["instance", "input_format", "stored_size"]
    list_select_related = ["instance"]
    list_filter = ["input_format"]
    exclude = ["data"]  # shown, decoded or not, on the task's page
    readonly_fields = ["instance", "input_format", "stored_size"]

    def get_queryset(self, request):
        # The database measures the inputs; they are never fetched here.
        return (super().get_queryset(request).defer("data")
                .annotate(stored_bytes=ByteLength("data")))

    @admin.display(description="stored size")
    def stored_size(self, obj):
        return f"{obj.stored_bytes:,} bytes"


@admin.register(Response)
class ResponseAdmin(ReadOnlyAdmin):
    list_display = ["instance", "content_type", "size", "stored"]
    list_select_related = ["instance"]
    exclude = ["data"]  # previewed and downloadable on the task's page

    def get_queryset(self, request):
        return super().get_queryset(request).defer("data")


@admin.register(Daemon)
class DaemonAdmin(ReadOnlyAdmin):
    started_shown = time_column("started")
    heartbeat_shown = time_column("heartbeat", "last heartbeat")
    stopped_shown = time_column("stopped")
    list_display = ["__str__", "host", "pid", "started_shown", "heartbeat_shown", "stopped_shown", "workers",
                    "types"]
    list_filter = ["host"]
