"""The admin of schedules (periodic tasks): edited with the checks of ``atp.schedule``."""

from django import forms
from django.contrib import admin

from atp import audit, engine, schedules
from atp.admin.inputs import InputsSeenAsTasks
from atp.admin.keys import NumericKeys
from atp.admin.lookups import CheckedLookups
from atp.admin.paginators import no_facets
from atp.admin.times import time_column
from atp.bulk import Outcome
from atp.engine.schedules import clean_schedule
from atp.exceptions import AtpError, InputsNotSerializable, InputsTooLarge, ScheduleNotFound
from atp.models import Schedule
from atp.permissions import VIEW_INPUTS, WRITE_INPUTS
from atp.serialization import load_json

EDITABLE = ["name", "type", "cron", "interval", "timezone", "inputs", "priority", "catch_up",
            "enabled"]


class ScheduleForm(forms.ModelForm):
    """Checks a schedule as ``atp.schedule`` does, each error on its field."""

    inputs = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}), initial="null",
        help_text="The inputs of each task, as JSON.")

    class Meta:
        model = Schedule
        fields = EDITABLE

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        name = cleaned.get("name", self.instance.name)
        # Without the right to write inputs, the type (of a saved schedule) and the inputs
        # are not in the form: what the schedule runs stays as it is (a new one: no inputs).
        self.task_type = cleaned["type"] if "type" in self.fields else self.instance.type
        try:
            inputs = load_json(cleaned["inputs"] if "inputs" in self.fields
                               else self.instance.inputs)
        except ValueError as exc:
            self._add_error("inputs", f"not JSON: {exc}")
            return cleaned
        self.arguments = {
            "cron": cleaned["cron"], "every": cleaned["interval"], "timezone": cleaned["timezone"],
            "inputs": inputs, "priority": cleaned["priority"], "catch_up": cleaned["catch_up"],
            "enabled": cleaned["enabled"],
        }
        try:
            clean_schedule(name, self.task_type, **self.arguments)
        except AtpError as exc:
            self._add_error(self._field_of(exc), str(exc))
        return cleaned

    def _add_error(self, field, message):
        # A field the user may not write is not in the form: its error is the form's.
        self.add_error(field if field in self.fields else None, message)

    def _field_of(self, error):
        message = str(error)
        if isinstance(error, (InputsNotSerializable, InputsTooLarge)):
            return "inputs"
        for name in ("priority", "catch_up"):
            if message.startswith(name):
                return name
        if "schedule name" in message:
            return "name"
        if "time zone" in message:
            return "timezone"
        if "not both" in message:
            return None
        if "cron" in message:
            return "cron"
        if "every" in message:
            return "interval"
        return None


@no_facets
@admin.register(Schedule)
class ScheduleAdmin(InputsSeenAsTasks, CheckedLookups, NumericKeys, admin.ModelAdmin):
    list_display = ["name", "type", "timetable", "next_run_shown", "last_run_shown", "enabled"]
    list_filter = ["enabled"]
    search_fields = ["name", "type__identifier"]
    list_select_related = ["type"]
    actions = ["enable_schedules", "disable_schedules"]
    form = ScheduleForm
    fields = EDITABLE + ["next_run_shown", "last_run_shown", "created_shown", "updated_shown"]
    readonly_fields = ["next_run_shown", "last_run_shown", "created_shown", "updated_shown"]
    # Due times in the schedule's own time zone (its cron's; UTC for an interval), said.
    next_run_shown = time_column("next_run", "next run", zone_of=lambda schedule: schedule.timezone)
    last_run_shown = time_column("last_run", "last run", zone_of=lambda schedule: schedule.timezone)
    created_shown = time_column("created")
    updated_shown = time_column("updated")

    class Media:
        css = {"all": ["atp/atp.css"]}

    def get_readonly_fields(self, request, obj=None):
        # The name names the runs' tasks: a renamed schedule is a new one.
        readonly = self.readonly_fields + (["name"] if obj is not None else [])
        if not (request.user.has_perm(WRITE_INPUTS) and request.user.has_perm(VIEW_INPUTS)):
            # A schedule runs its type's handler with its inputs: writing either is writing
            # a task's inputs (a deferred call's name a function), so it needs what that
            # needs. Others choose the type of a new schedule, whose inputs are null.
            readonly = readonly + ["inputs"] + (["type"] if obj is not None else [])
        return readonly

    @admin.display(description="when", ordering="cron")
    def timetable(self, obj):
        if obj.interval is not None:
            return f"every {schedules.describe_interval(obj.interval)}"
        return f"{obj.cron} ({obj.timezone or 'UTC'})"

    def save_model(self, request, obj, form, change):
        # Through the verb: it locks the row and recomputes the next due time as the API does.
        saved = engine.save_schedule(obj.name, form.task_type, **form.arguments)
        obj.pk = saved.pk
        obj.refresh_from_db()

    def delete_model(self, request, obj):
        try:
            engine.delete_schedule(obj.name)
        except ScheduleNotFound:
            pass  # gone meanwhile: what the operator wanted

    def delete_queryset(self, request, queryset):
        for schedule in queryset:
            self.delete_model(request, schedule)

    def _switch(self, request, queryset, enabled, done_label):
        outcome = Outcome()
        for schedule in queryset:
            try:
                engine.set_schedule_enabled(schedule.name, enabled)
            except ScheduleNotFound:
                outcome.refused["already gone"] += 1
            else:
                outcome.changed.append(schedule)
        audit.record(request.user, Schedule, [(s.pk, s) for s in outcome.changed],
                     done_label.capitalize())
        self.message_user(request, outcome.message(done_label))

    @admin.action(description="Enable selected schedules (from their next due time)",
                  permissions=["change"])
    def enable_schedules(self, request, queryset):
        self._switch(request, queryset, True, "enabled")

    @admin.action(description="Disable selected schedules", permissions=["change"])
    def disable_schedules(self, request, queryset):
        self._switch(request, queryset, False, "disabled")
