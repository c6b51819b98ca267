"""django-atp's pages: ``path("atp/", include("atp.urls"))``."""

from django.urls import path, register_converter

from atp.converters import TaskIdConverter
from atp.views.dashboard import dashboard
from atp.views.tasks import task_action, task_detail, task_list, task_response, task_status
from atp.views.types import type_action

app_name = "atp"

register_converter(TaskIdConverter, "atp_task_id")

urlpatterns = [
    path("", dashboard, name="dashboard"),
    path("tasks/", task_list, name="task_list"),
    path("tasks/<atp_task_id:pk>/", task_detail, name="task_detail"),
    path("tasks/<atp_task_id:pk>.json", task_status, name="task_status"),
    path("tasks/<atp_task_id:pk>/response", task_response, name="task_response"),
    path("tasks/<atp_task_id:pk>/<slug:verb>/", task_action, name="task_action"),
    path("types/<int:pk>/<slug:verb>/", type_action, name="type_action"),
]
