"""The admin of task types: their parameters, their live tasks, pausing and resuming."""

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import Count, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.utils.html import format_html, format_html_join

from atp import audit, engine, registry, stats
from atp.admin.keys import NumericKeys
from atp.admin.lookups import CheckedLookups
from atp.admin.paginators import no_facets
from atp.bulk import Outcome
from atp.exceptions import InvalidParameter, TaskTypeInUse, TaskTypeNotFound
from atp.models import Task, Type
from atp.rates import format_rate, parse_rate
from atp.states import LIVE
from atp.templatetags.atp import status_badge

#: What an operator may change on a type's page; the rest comes from code.
TUNABLE = ["description", "timeout", "max_restarts", "retention", "max_concurrency", "rate",
           "bucket_size", "max_input_bytes", "max_response_bytes", "max_queued", "dedup_window",
           "retry_limit",
           "age_limit", "min_backoff", "max_backoff", "max_doublings", "retry_jitter", "max_snoozes", "key_concurrency", "key_rate",
           "key_bucket_size"]


class TypeForm(forms.ModelForm):
    """Checks the tuned parameters as ``register_task_type`` would."""

    rate = forms.CharField(
        required=False, help_text=Type._meta.get_field("rate").help_text.replace(
            "per second, on average", "on average, per second (\"5/s\"), minute (\"20/m\"), "
            "hour or day").replace(' (the API also takes "5/s", "20/m")', ""))
    key_rate = forms.CharField(
        required=False, help_text=Type._meta.get_field("key_rate").help_text.replace(
            "per second, on average", "on average, per second (\"5/s\"), minute (\"10/m\"), "
            "hour or day").replace(' (the API also takes "10/m")', ""))

    class Meta:
        model = Type
        fields = TUNABLE

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.initial["rate"] = format_rate(self.instance.rate)
        self.initial["key_rate"] = format_rate(self.instance.key_rate)

    def _clean_a_rate(self, name):
        given = self.cleaned_data[name].strip()
        try:
            return parse_rate(name, given) if given else None
        except InvalidParameter as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_rate(self):
        return self._clean_a_rate("rate")

    def clean_key_rate(self):
        return self._clean_a_rate("key_rate")

    def clean(self):
        cleaned = super().clean()
        for name in TUNABLE:
            if name in self.changed_data and name in cleaned:
                try:
                    registry.clean_type_parameters({name: cleaned[name]})
                except InvalidParameter as exc:
                    self.add_error(name, str(exc))
        if cleaned.get("bucket_size") is not None and cleaned.get("rate") is None:
            self.add_error("bucket_size", "A bucket size needs a rate: it is the size of the "
                                          "rate's bucket.")
        if cleaned.get("key_bucket_size") is not None and cleaned.get("key_rate") is None:
            self.add_error("key_bucket_size", "A key's bucket size needs a key_rate: it is the "
                                              "size of each key's bucket.")
        return cleaned


class RunningOrPaused(admin.SimpleListFilter):
    """Types by whether they are paused, said as an operator says it."""

    title = "state"
    parameter_name = "paused"

    def lookups(self, request, model_admin):
        return [("no", "Running"), ("yes", "Paused")]

    def queryset(self, request, queryset):
        if self.value() is None:
            return queryset
        if self.value() not in ("yes", "no"):
            raise IncorrectLookupParameters(f"paused={self.value()!r}: 'yes' or 'no'")
        return queryset.filter(is_paused=self.value() == "yes")


@no_facets
@admin.register(Type)
class TypeAdmin(CheckedLookups, NumericKeys, admin.ModelAdmin):
    list_display = ["identifier", "handler", "timeout", "max_restarts", "retention",
                    "max_concurrency", "rate_shown", "state", "live_tasks", "run_by"]
    list_filter = [RunningOrPaused, "pull", "input_format"]
    search_fields = ["identifier", "handler"]
    actions = ["pause_types", "resume_types", "purge_types", "unregister_types"]
    form = TypeForm
    # The handler and the input format come from code; the rest an operator may tune
    # (a @task_type declaration sets again what it names when the daemon starts).
    readonly_fields = ["declared_in_code", "identifier", "handler", "input_format", "state",
                       "live_by_state", "run_by", "created", "updated"]
    fields = ["declared_in_code", "identifier", "handler", "input_format", "description", "timeout",
              "max_restarts", "retention", "max_concurrency", "rate", "bucket_size",
              "max_input_bytes",
              "max_response_bytes", "max_queued", "dedup_window", "retry_limit", "age_limit", "min_backoff", "max_backoff",
              "max_doublings", "retry_jitter", "max_snoozes", "key_concurrency", "key_rate", "key_bucket_size", "state", "live_by_state", "run_by", "created",
              "updated"]

    class Media:
        css = {"all": ["atp/atp.css"]}

    @admin.display(description="rate", ordering="rate")
    def rate_shown(self, task_type):
        return format_rate(task_type.rate) or "-"

    def has_add_permission(self, request):
        return False  # types are registered in code

    def has_delete_permission(self, request, obj=None):
        return False  # only the "unregister" action removes a type, and only an unused one

    def has_unregister_permission(self, request):
        return request.user.has_perm("atp.delete_type")

    def save_model(self, request, obj, form, change):
        # Only what the operator changed, through the verb: saving the whole row would
        # write back a pause or a code declaration that changed since the form loaded.
        tuned = {name: form.cleaned_data[name] for name in form.changed_data if name in TUNABLE}
        engine.update_task_type(obj.identifier, **tuned)
        obj.refresh_from_db()

    def get_fields(self, request, obj=None):
        fields = self.fields
        if obj is None or obj.identifier not in registry.declarations():
            fields = [name for name in fields if name != "declared_in_code"]
        if obj is not None and obj.pull:  # what a pull type does not take (register_pull_type)
            return [name for name in fields if name not in engine.NOT_FOR_PULL]
        return fields

    @admin.display(description="declared in code")
    def declared_in_code(self, obj):
        """Warn that a daemon's start writes the ``@task_type`` values over the tuned ones."""
        declaration = registry.declarations().get(obj.identifier)
        if declaration is None:
            return "-"
        module = declaration.handler.rpartition(".")[0]
        named = [name for name in TUNABLE if name in declaration.parameters]
        if not named:
            return f"@task_type in {module}, which names none of the values below: what you tune stays."
        return format_html(
            '<span class="atp-warning">@task_type in {}: each daemon\'s start (and each migrate) '
            "writes its values of {} back over what you tune here.</span> Change those in the "
            "code; a change made here lasts until then.", module, ", ".join(named))

    @admin.display(description="state", ordering="is_paused")
    def state(self, obj):
        """Paused or running, as an operator says it (not a red cross on a healthy type)."""
        if obj.is_paused:
            return format_html('<span class="atp-warning">{}</span>', "Paused")
        return "Running"

    def get_queryset(self, request):
        live = (
            Task.objects.filter(type=OuterRef("pk"), instance__status__in=LIVE)
            .order_by().values("type").annotate(count=Count("pk")).values("count")
        )
        queryset = super().get_queryset(request).annotate(live=Coalesce(Subquery(live), 0))
        return stats.with_runners(queryset)

    @admin.display(description="live tasks", ordering="live")
    def live_tasks(self, obj):
        return obj.live

    @admin.display(description="run by", ordering="runners")
    def run_by(self, obj):
        """How many live daemons run the type: those that have loaded its handler."""
        if obj.pull:
            return "pull consumers (lease_tasks)"
        if obj.runners:
            return f"{obj.runners} live daemon{'s' if obj.runners > 1 else ''}"
        return format_html('<span class="atp-warning">{}</span>', "no live daemon runs this type")

    @admin.display(description="live tasks by state")
    def live_by_state(self, obj):
        counts = stats.live_counts()
        return format_html_join(
            " ", "{} {}", ((status_badge(s), counts.get((obj.pk, s), 0)) for s in LIVE)
        )

    def _toggle(self, request, queryset, verb, done_label):
        outcome = Outcome()
        for task_type in queryset:
            verb(task_type)
            outcome.changed.append(task_type)
        audit.record(request.user, Type, [(t.pk, t) for t in outcome.changed],
                     done_label.capitalize())
        self.message_user(request, outcome.message(done_label))

    @admin.action(description="Pause selected types (no new task starts)", permissions=["change"])
    def pause_types(self, request, queryset):
        self._toggle(request, queryset, engine.pause_type, "paused")

    @admin.action(description="Resume selected types", permissions=["change"])
    def resume_types(self, request, queryset):
        self._toggle(request, queryset, engine.resume_type, "resumed")

    @admin.action(description="Purge selected types (cancel their waiting tasks)",
                  permissions=["purge"])
    def purge_types(self, request, queryset):
        cancelled = 0
        for task_type in queryset:
            cancelled += engine.purge_type(
                task_type, f"purged by {request.user.get_username()} from the admin",
                by=request.user)
        audit.record(request.user, Type, [(t.pk, t) for t in queryset], "Purged")
        self.message_user(request, f"{cancelled} waiting task(s) cancelled.")

    def has_purge_permission(self, request):
        # Cancelling tasks is a change of tasks, not of their type.
        return request.user.has_perm("atp.change_instance")

    @admin.action(description="Unregister selected types (only those without tasks)",
                  permissions=["unregister"])
    def unregister_types(self, request, queryset):
        outcome = Outcome()
        for task_type in queryset:
            try:
                engine.unregister_task_type(task_type.identifier)
            except TaskTypeInUse:
                outcome.refused["it has tasks"] += 1
            except TaskTypeNotFound:
                outcome.refused["already gone"] += 1
            else:
                outcome.changed.append(task_type)
        audit.record(request.user, Type, [(t.pk, t) for t in outcome.changed], "Unregistered",
                     deleted=True)
        level = messages.WARNING if outcome.refused else messages.SUCCESS
        self.message_user(request, outcome.message("unregistered"), level)
