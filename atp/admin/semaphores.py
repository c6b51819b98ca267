"""The semaphores in the admin: each with its limit, its holders and its waiters.

Read-only: a semaphore's limit is set with ``atp.set_semaphore`` (a key's is its
type's ``key_concurrency``, tuned on the type's page)."""

from django.contrib import admin
from django.db.models import Count, Q

from atp.admin.others import ReadOnlyAdmin
from atp.models import Semaphore


@admin.register(Semaphore)
class SemaphoreAdmin(ReadOnlyAdmin):
    list_display = ["label", "limit_shown", "holders", "waiters", "type", "updated"]
    fields = ["label", "limit_shown", "holders", "waiters", "type", "created", "updated"]
    readonly_fields = fields
    list_select_related = ["type"]
    search_fields = ["name"]
    ordering = ["name"]

    def get_queryset(self, request):
        held = Q(holds__instance__task__daemon__isnull=False)
        waiting = Q(holds__instance__task__isnull=False, holds__instance__task__daemon__isnull=True)
        return super().get_queryset(request).annotate(
            holders_count=Count("holds", filter=held), waiters_count=Count("holds", filter=waiting))

    @admin.display(description="name", ordering="name")
    def label(self, obj):
        return obj.label

    @admin.display(description="limit")
    def limit_shown(self, obj):
        if obj.limit is not None:
            return obj.limit
        if obj.type_id is not None:
            most = obj.type.key_concurrency
            return f"{most} (key_concurrency)" if most is not None else "no limit"
        return "no limit"

    @admin.display(description="holders", ordering="holders_count")
    def holders(self, obj):
        """Tasks holding a slot: their attempt holds a lease."""
        return obj.holders_count

    @admin.display(description="waiters", ordering="waiters_count")
    def waiters(self, obj):
        """Tasks waiting that hold it: claimed only with a slot of it."""
        return obj.waiters_count
