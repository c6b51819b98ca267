"""Operators leave a trace: who did what, in the task's history and in the admin log."""

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry

import atp
from atp.models import LogRecord, Type
from atp.states import Status
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/atp/instance/"


@pytest.fixture
def operator(log_in):
    return log_in("superuser")


def entries(model, pk=None):
    rows = LogEntry.objects.filter(content_type__model=model._meta.model_name)
    if pk is not None:
        rows = rows.filter(object_id=str(pk))
    return list(rows.order_by("id").values_list("user__username", "action_flag", "change_message"))


@pytest.mark.parametrize("action, status, done", [
    ("reenqueue_tasks", Status.FAILED, "Re-enqueued"),
    ("pause_tasks", Status.RUNNING, "Paused"),
    ("resume_tasks", Status.PAUSED, "Resumed"),
    ("cancel_tasks", Status.RUNNING, "Cancelled"),
])
def test_admin_actions_record_who_did_them(operator, noop_type, action, status, done):
    task = TaskFactory(type=noop_type, status=status)
    refused = TaskFactory(type=noop_type, status=Status.FINISHED)
    operator.post(CHANGELIST, {"action": action, "_selected_action": [task.pk, refused.pk],
                              "confirmed": "yes"})
    last = LogRecord.objects.filter(instance=task).last()
    assert last.actor == "superuser"
    assert entries(task._meta.model, task.pk) == [("superuser", CHANGE, done)]
    assert entries(task._meta.model, refused.pk) == [], "a refused change is no action"
    page = operator.get(f"/admin/atp/instance/{task.pk}/change/").content.decode()
    assert "superuser" in page


@pytest.mark.parametrize("button, status, done", [
    ("reenqueue", Status.CANCELLED, "Re-enqueued"), ("pause", Status.RUNNING, "Paused"),
    ("resume", Status.PAUSED, "Resumed"), ("cancel", Status.ACCEPTED, "Cancelled"),
])
def test_page_buttons_record_who_pressed_them(operator, noop_type, button, status, done):
    task = TaskFactory(type=noop_type, status=status)
    operator.post(f"/atp/tasks/{task.pk}/{button}/")
    assert LogRecord.objects.filter(instance=task).last().actor == "superuser"
    assert entries(task._meta.model, task.pk) == [("superuser", CHANGE, done)]
    assert "superuser" in operator.get(f"/atp/tasks/{task.pk}/").content.decode()


def test_deleting_tasks_is_in_the_admin_log(operator, noop_type):
    ended = TaskFactory(type=noop_type, status=Status.FINISHED, identifier="nightly-7")
    operator.post(CHANGELIST, {"action": "delete_ended_tasks", "_selected_action": [ended.pk],
                              "confirmed": "yes"})
    assert entries(ended._meta.model, ended.pk) == [("superuser", DELETION, "Deleted")]
    assert LogEntry.objects.get(object_id=str(ended.pk)).object_repr == f"#{ended.pk} nightly-7"


def test_pausing_and_resuming_types_is_in_the_admin_log(operator, noop_type):
    url = "/admin/atp/type/"
    operator.post(url, {"action": "pause_types", "_selected_action": [noop_type.pk]})
    assert Type.objects.get(pk=noop_type.pk).is_paused
    operator.post(url, {"action": "resume_types", "_selected_action": [noop_type.pk]})
    assert entries(Type, noop_type.pk) == [("superuser", CHANGE, "Paused"),
                                           ("superuser", CHANGE, "Resumed")]


def test_the_api_records_who_when_told(noop_type, django_user_model):
    alice = django_user_model.objects.create_user("alice")
    task = TaskFactory(type=noop_type, status=Status.RUNNING)
    atp.pause(task, by=alice)
    atp.resume(task, by="deploy-script")
    actors = list(LogRecord.objects.filter(instance=task).values_list("actor", flat=True))
    assert actors[-2:] == ["alice", "deploy-script"]
    assert not LogEntry.objects.exists(), "the API leaves the admin log to the admin"
