"""django-atp's pages: ``path("atp/", include("atp.urls"))``."""

from django.urls import path, register_converter

from atp.converters import TaskIdConverter
from atp.views.bulk import task_bulk
from atp.views.dashboard import dashboard
from atp.views.headers import with_page_headers
from atp.views.probes import health, metrics
from atp.views.tasks import task_action, task_detail, task_list, task_response, task_status
from atp.views.types import type_action, type_detail

app_name = "atp"

register_converter(TaskIdConverter, "atp_task_id")


def page(route, view, name):
    """A route of atp's pages: each answers with atp's headers (``atp.views.headers``)."""
    return path(route, with_page_headers(view), name=name)


urlpatterns = [
    page("", dashboard, "dashboard"),
    page("tasks/", task_list, "task_list"),
    page("tasks/bulk/", task_bulk, "task_bulk"),
    page("tasks/<atp_task_id:pk>/", task_detail, "task_detail"),
    page("tasks/<atp_task_id:pk>.json", task_status, "task_status"),
    page("tasks/<atp_task_id:pk>/response", task_response, "task_response"),
    page("tasks/<atp_task_id:pk>/<slug:verb>/", task_action, "task_action"),
    # A type's number too: no key column holds more than 18 digits (Django 4.2 on SQLite
    # fails with OverflowError on a longer <int:pk>).
    page("types/<atp_task_id:pk>/", type_detail, "type_detail"),
    page("types/<atp_task_id:pk>/<slug:verb>/", type_action, "type_action"),
    page("metrics", metrics, "metrics"),
    page("health", health, "health"),
]
