import datetime
import re

import pytest
from django.db.models import F

import atp
from atp.models import Daemon, Instance, LogRecord, Type
from atp.states import Status
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


def cells(page, identifier):
    row = re.search(rf">{re.escape(identifier)}</a>.*?</tr>", page, re.S).group(0)
    return [int(n) for n in re.findall(r'<td class="atp-num">(?:<a [^>]*>|<span class="atp-zero">)?(\d+)', row)]


def test_the_dashboard_counts_tasks_by_type_and_state(log_in, noop_type, daemon):
    client = log_in("view only")
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    for status in (Status.RUNNING, Status.PAUSED, Status.FINISHED, Status.FAILED,
                   Status.CANCELLED, Status.ACCEPTED, Status.ACCEPTED):
        TaskFactory(type=noop_type, status=status, daemon=daemon)
    TaskFactory(type=atp.get_type("tests.echo"), status=Status.SCHEDULED, daemon=daemon)
    page = client.get("/atp/").content.decode()
    # accepted, scheduled, running, paused | finished, failed, cancelled in the last hour
    assert cells(page, "tests.noop") == [2, 0, 1, 1, 1, 1, 1]
    assert cells(page, "tests.echo") == [0, 1, 0, 0, 0, 0, 0]


def test_the_dashboard_shows_the_waiting_queue_and_live_daemons(log_in, noop_type):
    client = log_in("view only")
    atp.enqueue_many("tests.noop", [{}] * 3)
    atp.enqueue("tests.noop", countdown=600)
    now = datetime.datetime.now(datetime.UTC)
    Daemon.objects.create(host="alive", pid=1, started=now, heartbeat=now)
    silent = Daemon.objects.create(host="silent", pid=2, started=now, heartbeat=now)
    Daemon.objects.filter(pk=silent.pk).update(heartbeat=F("heartbeat") - datetime.timedelta(hours=1))
    page = client.get("/atp/?partial=1").content.decode()
    figures = re.findall(r'<div class="atp-value">([^<]+)</div><div class="atp-label">([^<]+)</div>', page)
    figures = {label: value for value, label in figures}
    assert figures["waiting to run"] == "3" and figures["delayed (eta)"] == "1"
    assert figures["live daemons"] == "1"
    assert figures["oldest waiting for"] != "—"
    assert "alive:1" in page and "silent:2" not in page
    assert "<html" not in page


def test_the_dashboard_refreshes_itself(log_in):
    page = log_in("view only").get("/atp/").content.decode()
    assert 'data-atp-refresh="/atp/?partial=1&amp;window=hour"' in page and "atp/live.js" in page


def test_types_are_paused_resumed_and_purged_from_the_dashboard(log_in, noop_type):
    waiting = atp.enqueue_many("tests.noop", [{}] * 3)
    operator = log_in("superuser")
    page = operator.get("/atp/").content.decode()
    assert f'action="/atp/types/{noop_type.pk}/pause/"' in page
    assert f'action="/atp/types/{noop_type.pk}/resume/"' not in page  # not paused
    response = operator.post(f"/atp/types/{noop_type.pk}/pause/", follow=True)
    assert "Type tests.noop paused." in response.content.decode()
    assert Type.objects.get(pk=noop_type.pk).is_paused
    assert f'action="/atp/types/{noop_type.pk}/resume/"' in response.content.decode()
    response = operator.post(f"/atp/types/{noop_type.pk}/purge/", follow=True)
    assert "3 waiting task(s) cancelled" in response.content.decode()
    assert {Instance.objects.get(pk=task.pk).status for task in waiting} == {Status.CANCELLED}
    assert "from atp's pages" in LogRecord.objects.filter(instance=waiting[0]).last().message
    operator.post(f"/atp/types/{noop_type.pk}/resume/")
    assert not Type.objects.get(pk=noop_type.pk).is_paused


@pytest.mark.parametrize("role, verb", [
    ("view only", "pause"), ("view only", "purge"), ("can change", "pause"),
])
def test_a_type_button_needs_its_permission(log_in, noop_type, role, verb):
    atp.enqueue("tests.noop")
    client = log_in(role)
    assert client.post(f"/atp/types/{noop_type.pk}/{verb}/").status_code == 403
    assert f"/atp/types/{noop_type.pk}/{verb}/" not in client.get("/atp/").content.decode()
    assert not Type.objects.get(pk=noop_type.pk).is_paused
    assert Instance.objects.get().status == Status.ACCEPTED


def test_a_type_button_only_takes_a_post_and_known_verbs(log_in, noop_type):
    operator = log_in("superuser")
    assert operator.get(f"/atp/types/{noop_type.pk}/pause/").status_code == 405
    assert operator.post(f"/atp/types/{noop_type.pk}/delete/").status_code == 404
    assert operator.post("/atp/types/999999/pause/").status_code == 404
