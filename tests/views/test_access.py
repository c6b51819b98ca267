"""Who may see what: every page and button against every kind of user."""

import pytest
from django.test import Client

import atp
from atp.models import Instance
from atp.states import Status
from tests.conftest import ROLES
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def task(noop_type):
    instance = TaskFactory(type=noop_type, status=Status.RUNNING, inputs={"secret": "s3cr3t-in"})
    atp.set_response(instance, "s3cr3t-out")
    return instance


def pages(task):
    pk, type_pk = task.pk, task.type_id
    return [
        "/atp/", "/atp/?partial=1", "/atp/?window=day", "/atp/tasks/", f"/atp/tasks/{pk}/",
        f"/atp/tasks/{pk}/?partial=1", f"/atp/tasks/{pk}.json", f"/atp/types/{type_pk}/",
        f"/atp/types/{type_pk}/?partial=1&window=day",
    ]


SEES = {"view only", "reads inputs and responses", "can change", "superuser"}
READS = {"reads inputs and responses", "can change", "superuser"}
CHANGES = {"can change", "superuser"}


@pytest.mark.parametrize("role", ROLES)
def test_pages_are_for_staff_who_may_view_tasks(log_in, task, role):
    client = log_in(role)
    for url in pages(task):
        response = client.get(url)
        if role == "anonymous":
            assert response.status_code == 302, url
            assert response["Location"].startswith("/admin/login/?next="), url
        elif role in SEES:
            assert response.status_code == 200, url
        else:
            assert response.status_code == 403, url


@pytest.mark.parametrize("role", ROLES)
def test_buttons_are_for_staff_who_may_change_tasks(log_in, task, role):
    client = log_in(role)
    response = client.post(f"/atp/tasks/{task.pk}/cancel/")
    cancelled = Instance.objects.get(pk=task.pk).status == Status.CANCELLED
    if role in CHANGES:
        assert response.status_code == 302 and response["Location"] == f"/atp/tasks/{task.pk}/"
        assert cancelled
    else:
        assert response.status_code in (302, 403)
        if role == "anonymous":
            assert response["Location"].startswith("/admin/login/")
        assert not cancelled


@pytest.mark.parametrize("role", ROLES)
def test_the_admin_follows_the_same_permissions(log_in, task, role):
    client = log_in(role)
    urls = ["/admin/atp/instance/", f"/admin/atp/instance/{task.pk}/change/"]
    for url in urls:
        status = client.get(url).status_code
        if role in SEES:
            assert status == 200, url
        elif role in ("anonymous", "non-staff with permissions"):
            assert status == 302, url  # the admin sends them to its login
        else:
            assert status == 403, url
    response = client.post("/admin/atp/instance/", {
        "action": "cancel_tasks", "_selected_action": [task.pk], "confirmed": "yes",
    })
    changed = Instance.objects.get(pk=task.pk).status == Status.CANCELLED
    assert changed == (role in CHANGES), response.status_code


@pytest.mark.parametrize("role", ROLES)
def test_inputs_and_responses_need_their_own_permissions(log_in, task, role):
    """Inputs and responses may hold what other staff must not read."""
    client = log_in(role)
    if role not in SEES:
        return  # the pages themselves are closed to them (above)
    reads = role in READS
    page = client.get(f"/atp/tasks/{task.pk}/").content.decode()
    assert ("s3cr3t-in" in page) == reads
    assert ("hidden: you may not view task inputs" in page) == (not reads)
    live = client.get(f"/atp/tasks/{task.pk}/?partial=1").content.decode()
    assert (f"/atp/tasks/{task.pk}/response" in live) == reads
    download = client.get(f"/atp/tasks/{task.pk}/response")
    assert download.status_code == (200 if reads else 403)
    assert (b"s3cr3t-out" in download.content) == reads
    status = client.get(f"/atp/tasks/{task.pk}.json").json()
    assert (status["response_url"] is not None) == reads
    admin_page = client.get(f"/admin/atp/instance/{task.pk}/change/").content.decode()
    assert ("s3cr3t-in" in admin_page) == reads
    assert ("s3cr3t-out" in admin_page) == reads
    admin_download = client.get(f"/admin/atp/instance/{task.pk}/response/")
    assert admin_download.status_code == (200 if reads else 403)


def test_buttons_refuse_a_post_without_the_csrf_token(log_in, task):
    client = log_in("can change", Client(enforce_csrf_checks=True))
    assert client.post(f"/atp/tasks/{task.pk}/cancel/").status_code == 403
    assert Instance.objects.get(pk=task.pk).status == Status.RUNNING
    client.get(f"/atp/tasks/{task.pk}/")
    token = client.cookies["csrftoken"].value
    response = client.post(f"/atp/tasks/{task.pk}/cancel/", HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 302
    assert Instance.objects.get(pk=task.pk).status == Status.CANCELLED


def test_buttons_only_answer_posts(log_in, task):
    client = log_in("superuser")
    assert client.get(f"/atp/tasks/{task.pk}/cancel/").status_code == 405
    assert Instance.objects.get(pk=task.pk).status == Status.RUNNING


@pytest.mark.parametrize(
    "url, status",
    [
        ("/atp/tasks/?status=DONE", 400),
        ("/atp/tasks/?before=abc", 400),
        ("/atp/tasks/?after=-1", 400),
        ("/atp/tasks/?before=%C2%B2", 400),  # "²" is a digit to str.isdigit
        ("/atp/tasks/?before=99999999999999999999999", 400),
        ("/atp/tasks/?type=a%00b", 400),
        ("/atp/tasks/?status=RUNNING%00", 400),
        ("/atp/tasks/99999999999999999999999/", 404),
        ("/atp/tasks/99999999999999999999999.json", 404),
        # The admin sends an address that names no task back to its index, with a message.
        ("/admin/atp/instance/99999999999999999999999/response/", 302),
        ("/admin/atp/instance/99999999999999999999999/change/", 302),
        ("/admin/atp/logrecord/99999999999999999999999/change/", 302),
        ("/admin/atp/type/99999999999999999999999/change/", 302),
        ("/admin/atp/instance/?q=99999999999999999999999", 200),
        ("/admin/atp/instance/?q=a%00b", 200),
        ("/atp/tasks/?type=no.such.type", 404),
        ("/atp/tasks/999999/", 404),
        ("/atp/tasks/999999.json", 404),
        ("/atp/tasks/999999/response", 404),
        ("/atp/tasks/0/", 404),
        ("/admin/atp/instance/999999/response/", 404),
        ("/admin/atp/instance/?status__exact=DONE", 200),  # a state no task has: none listed
        # A value no column can hold (tests/admin/test_lookups.py tries them all).
        ("/admin/atp/instance/?status__exact=%00", 400),
        ("/admin/atp/instance/?type__id__exact=999999999999999999999999999999", 400),
        ("/admin/atp/instance/?id__gt=999999999999999999999999999999", 400),
    ],
)
def test_bad_addresses_get_400_or_404_never_500(log_in, task, url, status):
    client = log_in("superuser")
    response = client.get(url)
    assert response.status_code == status
    if status == 302:
        assert client.get(url, follow=True).status_code == 200


def test_a_task_without_response_has_no_download(log_in, noop_type):
    client = log_in("superuser")
    bare = TaskFactory(type=noop_type)
    assert client.get(f"/atp/tasks/{bare.pk}/response").status_code == 404


def test_an_unknown_button_is_404(log_in, task):
    client = log_in("superuser")
    assert client.post(f"/atp/tasks/{task.pk}/explode/").status_code == 404
    assert client.post("/atp/tasks/999999/cancel/").status_code == 404
    assert client.post("/atp/types/99999999999999999999999/pause/").status_code == 404
