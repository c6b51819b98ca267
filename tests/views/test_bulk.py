import re

import pytest

import atp
from atp.daemon.execution import run_task
from atp.models import Instance
from atp.states import Status
from tests.factories import TaskFactory, claim_exactly

pytestmark = pytest.mark.django_db(transaction=True)

BULK = "/atp/tasks/bulk/"


@pytest.fixture
def staff(log_in):
    return log_in("can change")


def failed_with(message, daemon):
    task = claim_exactly(atp.enqueue("tests.fail", {"message": message}), daemon)
    run_task(task.pk, task.attempt, task.type.handler)
    return Instance.objects.get(pk=task.pk)


@pytest.fixture
def fail_type(db):
    return atp.register_task_type("tests.fail", "tests.handlers.fail", max_restarts=0)


def test_a_bulk_action_says_how_many_first_then_does_it(staff, fail_type, noop_type, daemon):
    timeouts = [failed_with("upstream timeout", daemon) for _ in range(3)]
    failed_with("bad input", daemon)
    TaskFactory(type=noop_type)
    form = {"action": "reenqueue", "status": "FAILED", "error": "TIMEOUT"}
    page = staff.post(BULK, form).content.decode()
    assert re.search(r'<strong id="atp-bulk-count">3</strong> tasks match', page)
    assert "Re-enqueue 3 tasks" in page
    assert {t.status for t in Instance.objects.filter(pk__in=[t.pk for t in timeouts])} == {Status.FAILED}
    response = staff.post(BULK, {**form, "confirmed": "yes"}, follow=True)
    assert response.redirect_chain[-1][0] == "/atp/tasks/?status=FAILED&error=TIMEOUT"
    assert "3 re-enqueued" in response.content.decode()
    assert {t.status for t in Instance.objects.filter(pk__in=[t.pk for t in timeouts])} == {Status.ACCEPTED}
    assert Instance.objects.filter(status=Status.FAILED).count() == 1  # "bad input" is left


def test_a_bulk_action_reports_what_it_refused(staff, noop_type):
    queued = TaskFactory(type=noop_type)
    finished = TaskFactory(type=noop_type, status=Status.FINISHED)
    response = staff.post(BULK, {"action": "cancel", "type": "tests.noop", "confirmed": "yes"},
                          follow=True)
    assert "1 cancelled, 1 refused: already finished" in response.content.decode()
    assert Instance.objects.get(pk=queued.pk).status == Status.CANCELLED
    assert Instance.objects.get(pk=finished.pk).status == Status.FINISHED


def test_a_filter_that_matches_nothing_offers_nothing_to_confirm(staff, noop_type):
    TaskFactory(type=noop_type)
    page = staff.post(BULK, {"action": "cancel", "q": "no-such-prefix"}).content.decode()
    assert "No task matches it: there is nothing to do." in page
    assert 'name="confirmed"' not in page
    response = staff.post(BULK, {"action": "cancel", "q": "no-such-prefix", "confirmed": "yes"},
                          follow=True)
    assert "0 cancelled" in response.content.decode()
    assert Instance.objects.get().status == Status.ACCEPTED


def test_bulk_delete_takes_the_delete_permission_and_deletes_only_ended_tasks(
        log_in, staff, noop_type):
    ended = TaskFactory(type=noop_type, status=Status.CANCELLED)
    queued = TaskFactory(type=noop_type)
    assert staff.post(BULK, {"action": "delete", "confirmed": "yes"}).status_code == 403
    superuser = log_in("superuser")
    response = superuser.post(BULK, {"action": "delete", "confirmed": "yes"}, follow=True)
    assert "1 deleted, 1 refused" in response.content.decode()
    assert list(Instance.objects.values_list("pk", flat=True)) == [queued.pk]
    assert not Instance.objects.filter(pk=ended.pk).exists()


def test_bulk_actions_take_post_and_the_change_permission(log_in, noop_type):
    TaskFactory(type=noop_type)
    viewer = log_in("view only")
    assert viewer.get(BULK).status_code == 405
    assert viewer.post(BULK, {"action": "cancel", "confirmed": "yes"}).status_code == 403
    assert Instance.objects.get().status == Status.ACCEPTED


@pytest.mark.parametrize("form, error", [
    ({"action": "explode"}, "unknown bulk action"),
    ({"action": "cancel", "status": "DONE"}, "unknown state 'DONE'"),
    ({"action": "cancel", "since": "yesterday"}, "since is not a date and time"),
    ({"action": "cancel", "q": "a\x00b"}, "q holds a NUL character"),
])
def test_bad_bulk_input_is_refused_and_changes_nothing(staff, noop_type, form, error):
    TaskFactory(type=noop_type)
    response = staff.post(BULK, {**form, "confirmed": "yes"})
    assert response.status_code == 400 and error in response.content.decode()
    assert response["Content-Type"].startswith("text/plain")
    assert Instance.objects.get().status == Status.ACCEPTED


def test_the_confirmation_escapes_what_it_was_sent(staff, noop_type):
    markup = '"><script>alert(1)</script>'
    page = staff.post(BULK, {"action": "cancel", "q": markup, "error": markup}).content.decode()
    assert "<script>alert(1)" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_a_bulk_action_refuses_a_post_without_the_csrf_token(log_in, noop_type):
    from django.test import Client

    task = TaskFactory(type=noop_type)
    client = log_in("can change", Client(enforce_csrf_checks=True))
    form = {"action": "cancel", "confirmed": "yes"}
    assert client.post(BULK, form).status_code == 403
    assert Instance.objects.get(pk=task.pk).status == Status.ACCEPTED
    client.get("/atp/tasks/")
    token = client.cookies["csrftoken"].value
    assert client.post(BULK, form, HTTP_X_CSRFTOKEN=token).status_code == 302
    assert Instance.objects.get(pk=task.pk).status == Status.CANCELLED
