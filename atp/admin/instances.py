"""The admin of tasks: a list that stays fast with millions of rows, a read-only page with
the state history, and actions that go through the queue verbs."""

import json

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.forms.models import BaseInlineFormSet
from django.http import HttpResponseBadRequest, HttpResponseNotAllowed
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, re_path, reverse
from django.utils import timezone
from django.utils.html import format_html

from atp import engine
from atp.admin.dropdowns import ChoiceDropdown, RelatedDropdown
from atp.admin.failures import FailureTextFilter
from atp.admin.keys import NumericKeys
from atp.admin.lookups import CheckedLookups
from atp.admin.paginators import EstimatedCountPaginator, no_facets
from atp.admin.querysets import DateProbingQuerySet
from atp.bulk import apply_to_each, delete_each_ended
from atp.buttons import applies, delay
from atp.converters import TASK_ID_PATTERN
from atp.http import media_type, serve_response
from atp.models import Instance, LogRecord, Response
from atp.permissions import VIEW_INPUTS, VIEW_RESPONSE
from atp.presentation import (
    HISTORY_SHOWN,
    describe_inputs,
    excerpt,
    format_duration,
    latest_failure_tail,
    timeline,
)
from atp.selection import search
from atp.states import Status
from atp.templatetags.atp import progress, status_badge, timestamp_zone

#: Larger inputs and responses are not shown on the task's page, only offered.
PREVIEW_MAX_BYTES = 64 * 1024
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp", "image/svg+xml")
#: The actions of the list offered as buttons on a task's page: their labels, and the
#: verbs whose states they apply to (``atp.buttons``; a button for another state is greyed).
TASK_BUTTONS = {
    "reenqueue_tasks": ("Re-enqueue", "reenqueue"), "run_again_tasks": ("Run again", "run_again"),
    "run_now_tasks": ("Run now", "run_now"), "pause_tasks": ("Pause", "pause"),
    "resume_tasks": ("Resume", "resume"), "cancel_tasks": ("Cancel", "cancel"),
    "delete_ended_tasks": ("Delete (ended)", "delete_ended"),
}
#: Who may see a task's inputs and response on its page.
PREVIEW_PERMISSIONS = {"inputs_preview": VIEW_INPUTS, "response_preview": VIEW_RESPONSE}


def _short_time(value):
    # The day and the time wrap onto two lines: the list fits a 1366-pixel window.
    if value is None:
        return ""
    local = timezone.localtime(value)
    return format_html('<span title="{}"><span class="atp-nowrap">{}</span> <span class="atp-nowrap">{}</span></span>',
                       timestamp_zone(value), f"{local:%m-%d}", f"{local:%H:%M:%S}")


class RecentHistoryFormSet(BaseInlineFormSet):
    """The latest ``HISTORY_SHOWN`` entries, oldest first; ``total`` counts them all."""

    def get_queryset(self):
        # Asked for once per form: read the history once.
        if not hasattr(self, "_recent"):
            everything = super().get_queryset()
            self.total = everything.count()
            recent = everything.order_by("-id")[:HISTORY_SHOWN]
            self._recent = sorted(recent, key=lambda record: record.pk)
        return self._recent


class StateHistoryInline(admin.TabularInline):
    """The task's state history as a timeline: time, state, time spent, attempt, daemon, message."""

    model = LogRecord
    formset = RecentHistoryFormSet
    template = "atp/admin/state_history_inline.html"
    fields = ["time", "status", "attempt", "daemon", "actor", "message"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    verbose_name = "state history entry"
    verbose_name_plural = "state history"

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_view_permission(self, request, obj=None):
        # The history is part of the task: whoever may see the task sees it, without
        # needing a permission on the history table itself.
        return (request.user.has_perm("atp.view_instance")
                or request.user.has_perm("atp.change_instance"))


@no_facets
@admin.register(Instance)
class InstanceAdmin(CheckedLookups, NumericKeys, admin.ModelAdmin):
    # Chosen to fit a 1366-pixel window beside the admin's menu and filters: a failure's
    # last line and the progress sit under the state, times wrap after the day.
    list_display = ["task_shown", "type", "state_in_list", "tries", "created_at", "finished_at",
                    "run_time", "daemon"]
    list_display_links = ["task_shown"]
    list_filter = [("type", RelatedDropdown), ("status", ChoiceDropdown),
                   ("daemon", RelatedDropdown), FailureTextFilter]
    list_select_related = ["type", "daemon"]
    list_per_page = 50
    search_fields = ["=identifier"]
    search_help_text = "A task number, the beginning of an identifier, or a type's identifier."
    date_hierarchy = "created"
    ordering = ["-id"]
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    # Sorting by anything but an indexed column sorts every row.
    sortable_by = ["task_shown", "created_at"]
    inlines = [StateHistoryInline]
    change_form_template = "atp/admin/instance_change_form.html"
    actions = ["reenqueue_tasks", "run_again_tasks", "run_now_tasks", "pause_tasks",
               "resume_tasks", "cancel_tasks", "delete_ended_tasks"]
    fieldsets = [
        (None, {"fields": ["type", "identifier", "state", "priority", "attempt", "restarts"]}),
        ("Progress", {"fields": ["progress_bar", "progress_message"]}),
        ("Times (database clock)", {"fields": ["created_time", "updated_time", "started_time",
                                               "finished_time", "run_time"]}),
        ("Daemon and batch", {"fields": ["daemon", "batch"]}),
        ("Inputs and response", {"fields": ["inputs_preview", "response_preview"]}),
    ]
    readonly_fields = ["type", "identifier", "state", "priority", "attempt", "restarts",
                       "progress_bar", "progress_message", "created_time", "updated_time",
                       "started_time", "finished_time", "run_time", "daemon", "batch",
                       "inputs_preview",
                       "response_preview"]

    class Media:
        css = {"all": ["atp/atp.css"]}

    # -- permissions: the page is for reading; changes go through the actions ------

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return obj is None and super().has_change_permission(request)

    def has_delete_permission(self, request, obj=None):
        return False  # only the "delete ended tasks" action deletes, through the verb

    def has_delete_ended_permission(self, request):
        return request.user.has_perm("atp.delete_instance")

    def get_fieldsets(self, request, obj=None):
        # Inputs and responses may hold what others must not read: each needs the view
        # permission of its own model.
        hidden = {name for name, permission in PREVIEW_PERMISSIONS.items()
                  if not request.user.has_perm(permission)}
        return [(title, {**options, "fields": [f for f in options["fields"] if f not in hidden]})
                for title, options in super().get_fieldsets(request, obj)]

    def get_actions(self, request, action_location=None):
        # Django 6.1 asks for the actions of a place (the list, or a task's page); older
        # versions only have the list's.
        if action_location is None:
            actions = super().get_actions(request)
        else:
            actions = super().get_actions(request, action_location=action_location)
        actions.pop("delete_selected", None)
        return actions

    def get_queryset(self, request):
        queryset = super().get_queryset(request).annotate(failure_tail=latest_failure_tail())
        return DateProbingQuerySet(model=queryset.model, query=queryset.query.chain(),
                                   using=queryset.db)

    def get_search_results(self, request, queryset, search_term):
        # Through the identifier index (the admin's own search would read every row),
        # as atp's task list searches.
        return search(queryset, search_term), False

    # -- columns and fields ---------------------------------------------------------

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(request, {"title": "Tasks", **(extra_context or {})})

    def view_on_site(self, obj):
        try:
            return reverse("atp:task_detail", args=[obj.pk])
        except NoReverseMatch:  # the project does not mount atp.urls
            return None

    @admin.display(description="task", ordering="id")
    def task_shown(self, obj):
        """Its number, and its identifier under it."""
        return format_html('#{}<br>{}', obj.pk, self.short_identifier(obj))

    @admin.display(description="identifier", ordering="identifier")
    def short_identifier(self, obj):
        text = obj.identifier if len(obj.identifier) <= 12 else f"{obj.identifier[:11]}…"
        return format_html('<span title="{}">{}</span>', obj.identifier, text)

    @admin.display(description="attempt", ordering="attempt")
    def tries(self, obj):
        """The attempt, and the restarts spent, if any."""
        if not obj.restarts:
            return obj.attempt
        return f"{obj.attempt} ({obj.restarts} restart{'s' if obj.restarts > 1 else ''})"

    @admin.display(description="created", ordering="created")
    def created_at(self, obj):
        return _short_time(obj.created)

    @admin.display(description="finished", ordering="finished")
    def finished_at(self, obj):
        return _short_time(obj.finished)

    @admin.display(description="failure")
    def failure(self, obj):
        if obj.status != Status.FAILED or not obj.failure_tail:
            return ""
        return format_html('<span class="atp-error-excerpt">{}</span>', excerpt(obj.failure_tail))

    @admin.display(description="created")
    def created_time(self, obj):
        return timestamp_zone(obj.created)

    @admin.display(description="updated")
    def updated_time(self, obj):
        return timestamp_zone(obj.updated)

    @admin.display(description="started")
    def started_time(self, obj):
        return timestamp_zone(obj.started) or "—"

    @admin.display(description="finished")
    def finished_time(self, obj):
        return timestamp_zone(obj.finished) or "—"

    @admin.display(description="state", ordering="status")
    def state(self, obj):
        return status_badge(obj.status)

    @admin.display(description="state")
    def state_in_list(self, obj):
        """The state, with a failure's last line or the progress under it."""
        under = self.failure(obj) or self.progress_bar(obj)
        if not under:
            return status_badge(obj.status)
        return format_html('{}<div class="atp-under-state">{}</div>', status_badge(obj.status), under)

    @admin.display(description="progress")
    def progress_bar(self, obj):
        return progress(obj)

    @admin.display(description="run time")
    def run_time(self, obj):
        return format_duration(obj.duration)

    @admin.display(description="inputs")
    def inputs_preview(self, obj):
        shown = describe_inputs(obj.pk)
        if shown is None:
            return "—"
        if not shown.is_json:
            return shown.text
        return format_html('<pre class="atp-pre">{}</pre>', shown.text)

    @admin.display(description="response")
    def response_preview(self, obj):
        response = Response.objects.filter(pk=obj.pk).defer("data").first()
        if response is None:
            return "—"
        url = reverse("admin:atp_instance_response", args=[obj.pk])
        link = format_html('<a href="{}">download</a> ({}, {} bytes)', url,
                           response.content_type, f"{response.size:,}")
        kind = media_type(response.content_type)
        if kind in IMAGE_TYPES:
            # An image element runs no script, even in SVG; the link downloads it.
            return format_html('{}<br><img src="{}" alt="response" style="max-width: 480px">',
                               link, url)
        if not response.charset or response.size > PREVIEW_MAX_BYTES:
            return link
        try:
            text = Response.objects.get(pk=obj.pk).text
        except (ValueError, LookupError):  # not in its charset, or an unknown charset
            return link
        if kind == "application/json":
            try:
                text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
            except ValueError:
                pass  # labelled JSON but is not: shown as it is
        return format_html('{}<pre class="atp-pre">{}</pre>', link, text)

    def get_urls(self):
        download = self.admin_site.admin_view(self.response_view)
        return [
            re_path(rf"^(?P<pk>{TASK_ID_PATTERN})/response/$", download,
                    name="atp_instance_response"),
            re_path(rf"^(?P<pk>{TASK_ID_PATTERN})/act/$",
                    self.admin_site.admin_view(self.task_action_view), name="atp_instance_act"),
            *super().get_urls(),
        ]

    def response_view(self, request, pk):
        if not (self.has_view_permission(request)
                and request.user.has_perm(PREVIEW_PERMISSIONS["response_preview"])):
            raise PermissionDenied
        pk = int(pk)
        return serve_response(get_object_or_404(Response, pk=pk), f"task-{pk}")

    def task_action_view(self, request, pk):
        """Apply one of the list's actions to one task (its page's buttons): the same
        action, confirmation and report, then back to the task's page."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        actions = self.get_actions(request)
        name = request.POST.get("action", "")
        if name not in actions or name not in TASK_BUTTONS:
            return HttpResponseBadRequest("unknown action, or not yours to take")
        # Django 6.1 gives an Action (its function in .func); older versions a tuple.
        function = getattr(actions[name], "func", None) or actions[name][0]
        response = function(self, request, self.get_queryset(request).filter(pk=int(pk)))
        return response or redirect("admin:atp_instance_change", int(pk))

    def render_change_form(self, request, context, *args, **kwargs):
        obj = context.get("original")
        if obj is not None:
            actions = self.get_actions(request)
            delayed = delay(obj) is not None
            context["atp_buttons"] = [
                (name, label, applies(verb, obj.status, delayed=delayed))
                for name, (label, verb) in TASK_BUTTONS.items() if name in actions
            ]
            # The same latest entries the history inline shows, oldest first.
            records = reversed(list(obj.log_records.order_by("-id")[:HISTORY_SHOWN]))
            context["atp_spent"] = {
                row.record.pk: row.spent
                for row in timeline(records, obj.status, timezone.now())
            }
        return super().render_change_form(request, context, *args, **kwargs)

    # -- actions --------------------------------------------------------------------

    def _report(self, request, outcome, done_label):
        level = (messages.ERROR if outcome.failed
                 else messages.WARNING if outcome.refused else messages.SUCCESS)
        self.message_user(request, outcome.message(done_label), level)

    def _confirmation(self, request, queryset, what):
        """Return the page that says how many tasks the action touches and asks to go on,
        or None once the operator said yes."""
        if request.POST.get("confirmed") == "yes":
            return None
        context = {
            **self.admin_site.each_context(request), "opts": self.model._meta,
            "title": f"{what.capitalize()}?", "what": what, "count": queryset.count(),
            "action": request.POST.get("action", ""),
            "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
            "select_across": request.POST.get("select_across", "0"),
            # From a task's page, "no" goes back to it; from the list, to the list.
            "back_url": (reverse("admin:atp_instance_change", args=[request.resolver_match.kwargs["pk"]])
                         if request.resolver_match.url_name == "atp_instance_act" else ""),
        }
        return TemplateResponse(request, "atp/admin/confirm_action.html", context)

    def _apply(self, request, queryset, verb, done_label, what):
        asked = self._confirmation(request, queryset, what)
        if asked is not None:
            return asked
        self._report(request, apply_to_each(queryset, verb, request.user, done_label), done_label)
        return None

    @admin.action(description="Re-enqueue selected tasks", permissions=["change"])
    def reenqueue_tasks(self, request, queryset):
        return self._apply(request, queryset, engine.reenqueue, "re-enqueued", "re-enqueue")

    @admin.action(description="Run selected ended tasks again (as new tasks)",
                  permissions=["change"])
    def run_again_tasks(self, request, queryset):
        return self._apply(request, queryset, engine.run_again, "queued again", "run again")

    @admin.action(description="Run selected delayed tasks now", permissions=["change"])
    def run_now_tasks(self, request, queryset):
        return self._apply(request, queryset, engine.run_now, "made runnable now", "run now")

    @admin.action(description="Pause selected running tasks", permissions=["change"])
    def pause_tasks(self, request, queryset):
        return self._apply(request, queryset, engine.pause, "paused", "pause")

    @admin.action(description="Resume selected paused tasks", permissions=["change"])
    def resume_tasks(self, request, queryset):
        return self._apply(request, queryset, engine.resume, "resumed", "resume")

    @admin.action(description="Cancel selected tasks", permissions=["change"])
    def cancel_tasks(self, request, queryset):
        return self._apply(request, queryset, engine.cancel, "cancelled", "cancel")

    @admin.action(description="Delete selected ended tasks", permissions=["delete_ended"])
    def delete_ended_tasks(self, request, queryset):
        asked = self._confirmation(request, queryset, "delete the ended ones of")
        if asked is not None:
            return asked
        self._report(request, delete_each_ended(queryset, engine.delete_ended, request.user),
                     "deleted")
        return None
