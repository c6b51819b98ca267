import datetime
import re

import pytest

import atp
from atp import engine
from atp.models import Instance, LogRecord, Type
from atp.states import Status
from tests.admin.test_instances import last_message
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


def test_the_type_list_counts_live_tasks(log_in, noop_type):
    admin = log_in("superuser")
    for status in (Status.RUNNING, Status.FINISHED, Status.ACCEPTED, Status.ACCEPTED):
        TaskFactory(type=noop_type, status=status)
    page = admin.get("/admin/atp/type/").content.decode()
    row = re.search(r"tests\.noop</a>.*?</tr>", page, re.S).group(0)
    assert re.search(r'<td class="field-live_tasks">3</td>', row)
    detail = admin.get(f"/admin/atp/type/{noop_type.pk}/change/").content.decode()
    assert re.search(r"atp-status-accepted\">accepted</span> 2", detail)
    assert re.search(r"atp-status-running\">running</span> 1", detail)


#: The retry policy's fields as the form shows them for a type that has none.
RETRIES = {"retry_limit": "", "age_limit": "", "min_backoff": "0.1", "max_backoff": "01:00:00",
           "max_doublings": "16"}


def test_operators_tune_parameters_but_not_the_handler(log_in, noop_type):
    admin = log_in("superuser")
    form = admin.get(f"/admin/atp/type/{noop_type.pk}/change/").content.decode()
    assert 'name="timeout"' in form and 'name="handler"' not in form
    response = admin.post(f"/admin/atp/type/{noop_type.pk}/change/", {
        "description": "tuned", "timeout": "00:02:00", "max_restarts": "5",
        "retention": "", "max_concurrency": "2", "handler": "os.system", **RETRIES,
        "retry_limit": "4",
    })
    assert response.status_code == 302
    noop_type.refresh_from_db()
    assert noop_type.timeout == datetime.timedelta(minutes=2) and noop_type.max_restarts == 5
    assert noop_type.retry_limit == 4
    assert noop_type.handler == "tests.handlers.noop"


def test_types_are_paused_and_resumed_by_actions(log_in, noop_type):
    admin = log_in("superuser")
    admin.post("/admin/atp/type/", {"action": "pause_types", "_selected_action": [noop_type.pk]})
    assert Type.objects.get(pk=noop_type.pk).is_paused
    admin.post("/admin/atp/type/", {"action": "resume_types", "_selected_action": [noop_type.pk]})
    assert not Type.objects.get(pk=noop_type.pk).is_paused
    assert "add" not in admin.get("/admin/atp/type/").content.decode().split("object-tools")[-1][:200]
    assert atp.get_type("tests.noop")


@pytest.mark.parametrize("field, value, message", [
    ("timeout", "00:00:00", "timeout must be a positive"),
    ("max_concurrency", "0", "max_concurrency must be an integer from 1"),
    ("max_restarts", "40000", "max_restarts must be an integer from 0 to 32767"),
    ("max_doublings", "63", "max_doublings must be an integer from 0 to 62"),
])
def test_a_bad_parameter_is_refused_on_the_form_and_changes_nothing(log_in, noop_type, field, value, message):
    admin = log_in("superuser")
    data = {"description": "", "timeout": "01:00:00", "max_restarts": "3", "retention": "",
            "max_concurrency": "", **RETRIES, field: value}
    response = admin.post(f"/admin/atp/type/{noop_type.pk}/change/", data)
    assert response.status_code == 200
    assert message in response.content.decode()
    assert Type.objects.get(pk=noop_type.pk).updated == noop_type.updated


def test_saving_the_form_keeps_a_pause_made_meanwhile(log_in, noop_type):
    admin = log_in("superuser")
    admin.get(f"/admin/atp/type/{noop_type.pk}/change/")
    atp.pause_type("tests.noop")  # someone pauses the type while the form is open
    admin.post(f"/admin/atp/type/{noop_type.pk}/change/", {
        "description": "", "timeout": "00:05:00", "max_restarts": "3", "retention": "",
        "max_concurrency": "", **RETRIES,
    })
    tuned = Type.objects.get(pk=noop_type.pk)
    assert tuned.timeout == datetime.timedelta(minutes=5) and tuned.is_paused


def test_types_are_unregistered_only_by_the_action_and_only_when_unused(log_in, noop_type):
    admin = log_in("superuser")
    used = atp.register_task_type("tests.used", "tests.handlers.noop")
    TaskFactory(type=used)
    assert admin.post(f"/admin/atp/type/{noop_type.pk}/delete/").status_code == 403
    response = admin.post("/admin/atp/type/", {"action": "unregister_types",
                                                "_selected_action": [noop_type.pk, used.pk]})
    assert last_message(response) == "1 unregistered, 1 refused: it has tasks"
    assert not Type.objects.filter(pk=noop_type.pk).exists()
    assert Type.objects.filter(pk=used.pk).exists()


def test_unregistering_needs_the_delete_permission(log_in, noop_type):
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    changer = log_in("can change")
    get_user_model().objects.get(username="can-change").user_permissions.add(
        *Permission.objects.filter(codename__in=["view_type", "change_type"]))
    page = changer.get("/admin/atp/type/").content.decode()
    assert "pause_types" in page and "unregister_types" not in page
    changer.post("/admin/atp/type/", {"action": "unregister_types",
                                      "_selected_action": [noop_type.pk]})
    assert Type.objects.filter(pk=noop_type.pk).exists()


def test_a_purge_cancels_the_selected_types_waiting_tasks(log_in, noop_type):
    admin = log_in("superuser")
    waiting = atp.enqueue_many("tests.noop", [{}] * 3)
    response = admin.post("/admin/atp/type/", {"action": "purge_types",
                                               "_selected_action": [noop_type.pk]}, follow=True)
    assert "3 waiting task(s) cancelled." in response.content.decode()
    assert {Instance.objects.get(pk=t.pk).status for t in waiting} == {Status.CANCELLED}
    assert "purged by" in LogRecord.objects.filter(instance=waiting[0]).last().message


def test_only_who_may_change_tasks_may_purge(log_in, noop_type, django_user_model):
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user("typist", password="x", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_type", "change_type"]))
    from django.test import Client

    client = Client()
    client.force_login(user)
    assert "purge_types" not in client.get("/admin/atp/type/").content.decode()
    queued = atp.enqueue("tests.noop")
    client.post("/admin/atp/type/", {"action": "purge_types", "_selected_action": [noop_type.pk]})
    assert Instance.objects.get(pk=queued.pk).status == Status.ACCEPTED


def test_operators_set_a_rate_as_they_write_it(log_in, noop_type):
    admin = log_in("superuser")
    data = {"description": "", "timeout": "01:00:00", "max_restarts": "3", "retention": "",
            "max_concurrency": "", **RETRIES}
    response = admin.post(f"/admin/atp/type/{noop_type.pk}/change/",
                          {**data, "rate": "20/m", "bucket_size": "2"})
    assert response.status_code == 302
    noop_type.refresh_from_db()
    assert noop_type.rate == pytest.approx(1 / 3) and noop_type.bucket_size == 2
    form = admin.get(f"/admin/atp/type/{noop_type.pk}/change/").content.decode()
    assert 'name="rate" value="20/m"' in form
    listed = admin.get("/admin/atp/type/").content.decode()
    assert '<td class="field-rate_shown">20/m</td>' in listed


@pytest.mark.parametrize("changes, message", [
    ({"rate": "5 a second"}, "rate must be a number of starts per second"),
    ({"rate": "", "bucket_size": "3"}, "A bucket size needs a rate"),
])
def test_a_bad_rate_is_refused_on_the_form(log_in, noop_type, changes, message):
    admin = log_in("superuser")
    data = {"description": "", "timeout": "01:00:00", "max_restarts": "3", "retention": "",
            "max_concurrency": "", **RETRIES, **changes}
    response = admin.post(f"/admin/atp/type/{noop_type.pk}/change/", data)
    assert response.status_code == 200
    assert message in response.content.decode()
    assert Type.objects.get(pk=noop_type.pk).updated == noop_type.updated


def test_a_types_state_reads_running_or_paused_and_filters_so(log_in, noop_type):
    admin = log_in("superuser")
    atp.register_task_type("tests.held", "tests.handlers.noop")
    engine.pause_type("tests.held")
    page = admin.get("/admin/atp/type/").content.decode()
    assert "By state" in page and ">Paused<" in page and "Running" in page
    assert "By is paused" not in page and "icon-no.svg" not in page
    paused = admin.get("/admin/atp/type/", {"paused": "yes"}).content.decode()
    assert "tests.held" in paused and "tests.noop</a>" not in paused
    assert admin.get("/admin/atp/type/", {"paused": "maybe"}).status_code == 400


def test_a_type_declared_in_code_warns_that_a_daemons_start_writes_it_back(log_in, noop_type, monkeypatch):
    from atp import registry

    admin = log_in("superuser")
    monkeypatch.setitem(registry._declarations, "tests.noop", registry.Declaration(
        "tests.noop", "tests.handlers.noop", {"timeout": datetime.timedelta(seconds=60)}))
    page = admin.get(f"/admin/atp/type/{noop_type.pk}/change/").content.decode()
    assert "@task_type in tests.handlers" in page and "writes its values of timeout back" in page
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    echo = Type.objects.get(identifier="tests.echo")
    assert "@task_type" not in admin.get(f"/admin/atp/type/{echo.pk}/change/").content.decode()
