"""The admin's filter of tasks by a word of their failure text, as atp's task list has it."""

from django.contrib import admin

from atp.selection import SEARCH_MAX_CHARS, failed_with


class FailureTextFilter(admin.SimpleListFilter):
    """A text box: the tasks whose failure holds a word (``atp.selection.failed_with``:
    the latest history entries only)."""

    title = "failure text"
    parameter_name = "failure"
    template = "atp/admin/failure_filter.html"

    def lookups(self, request, model_admin):
        return [("", "")]  # a text box, not choices; Django shows a filter that has some

    def queryset(self, request, queryset):
        word = (self.value() or "").strip()
        if not word:
            return queryset
        if len(word) > SEARCH_MAX_CHARS:
            return queryset.none()
        return queryset.filter(pk__in=failed_with(word))

    def choices(self, changelist):
        # The other parameters of the list, kept as hidden fields of the box's form.
        kept = {name: value for name, value in changelist.get_filters_params().items()
                if name != self.parameter_name}
        yield {
            "value": self.value() or "",
            "kept": [(name, item) for name, values in kept.items()
                     for item in ([values] if isinstance(values, str) else values)],
            "search": changelist.query,
        }
