import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

import atp
from atp import engine
from atp.daemon.execution import run_task
from atp.models import LogRecord
from atp.states import Status
from tests.factories import TaskFactory, claim_exactly

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(log_in):
    return log_in("can change")


def listed(response):
    return [int(pk) for pk in re.findall(r'<td class="atp-num"><a href="/atp/tasks/(\d+)/">', response.content.decode())]


def test_the_list_pages_newest_first_without_counting(staff, noop_type):
    pks = [t.pk for t in atp.enqueue_many("tests.noop", [{}] * 120)]
    with CaptureQueriesContext(connection) as queries:
        first = staff.get("/atp/tasks/")
    assert not any("COUNT(" in q["sql"].upper() for q in queries.captured_queries)
    seen, page = listed(first), first
    while match := re.search(r'href="\?[^"]*before=(\d+)"', page.content.decode()):
        page = staff.get(f"/atp/tasks/?before={match.group(1)}")
        seen += listed(page)
    assert seen == sorted(pks, reverse=True)
    back = staff.get(f"/atp/tasks/?after={seen[-51]}")
    assert listed(back) == seen[-101:-51]


def test_the_list_filters_by_type_and_state(staff, noop_type, daemon):
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    echo = atp.enqueue("tests.echo")
    done = TaskFactory(type=noop_type, status=Status.FINISHED, daemon=daemon)
    TaskFactory(type=noop_type)
    assert listed(staff.get("/atp/tasks/?type=tests.echo")) == [echo.pk]
    assert listed(staff.get("/atp/tasks/?status=FINISHED")) == [done.pk]
    assert listed(staff.get("/atp/tasks/?type=tests.echo&status=FINISHED")) == []


def test_the_detail_shows_inputs_progress_timeline_and_response(staff, daemon):
    atp.register_task_type("tests.ctx", "tests.handlers.log_and_respond")
    task = claim_exactly(atp.enqueue("tests.ctx", {"when": "today", "n": [1, 2]}), daemon)
    run_task(task.pk, task.attempt, task.type.handler, "host:1")
    page = staff.get(f"/atp/tasks/{task.pk}/").content.decode()
    assert "&quot;when&quot;: &quot;today&quot;" in page  # pretty JSON, escaped
    assert 'value="0.500"' in page and "1/2" in page and "halfway" in page
    for state in ("accepted", "scheduled", "running", "finished"):
        assert f"atp-status-{state}" in page
    assert f'href="/atp/tasks/{task.pk}/response"' in page
    assert "data-atp-final" in page  # a finished task stops refreshing
    assert "working on" in page  # the handler's log line


def test_the_live_part_refreshes_on_its_own(staff, noop_type):
    task = TaskFactory(type=noop_type, status=Status.RUNNING)
    page = staff.get(f"/atp/tasks/{task.pk}/").content.decode()
    assert f'data-atp-refresh="/atp/tasks/{task.pk}/?partial=1"' in page
    partial = staff.get(f"/atp/tasks/{task.pk}/?partial=1").content.decode()
    assert "<html" not in partial and 'id="atp-timeline"' in partial
    assert "data-atp-final" not in partial


def test_the_json_status_is_what_a_client_polls(staff, noop_type):
    task = TaskFactory(type=noop_type, status=Status.RUNNING)
    engine.set_progress(task, 3, 4, "three", attempt=task.attempt)
    status = staff.get(f"/atp/tasks/{task.pk}.json").json()
    assert (status["status"], status["attempt"], status["type"]) == ("RUNNING", 1, "tests.noop")
    assert status["progress"] == {"done": 3, "total": 4, "fraction": 0.75, "message": "three"}
    assert status["response_url"] is None and status["started"] and status["finished"] is None
    atp.set_response(task, {"rows": 1})
    assert staff.get(f"/atp/tasks/{task.pk}.json").json()["response_url"] == f"/atp/tasks/{task.pk}/response"


@pytest.mark.parametrize("data, content_type, is_shown", [
    (b"\x89PNG\r\n\x1a\n", "image/png", True),
    ('<svg xmlns="http://www.w3.org/2000/svg"/>', "image/svg+xml", False),  # a download
    ({"rows": 1}, None, False),
])
def test_an_image_response_is_shown_on_the_task_page(staff, log_in, noop_type, data, content_type,
                                                    is_shown):
    task = atp.enqueue("tests.noop")
    atp.set_response(task, data, content_type)
    page = staff.get(f"/atp/tasks/{task.pk}/").content.decode()
    image = f'<img class="atp-response-image" id="atp-response-image" src="/atp/tasks/{task.pk}/response"'
    assert (image in page) is is_shown
    viewer = log_in("view only", Client())  # who may not read responses sees no image
    assert "atp-response-image" not in viewer.get(f"/atp/tasks/{task.pk}/").content.decode()


@pytest.mark.parametrize(
    "data, content_type, disposition, served_type",
    [
        ("plain words", "text/plain", 'inline; filename="task-{}.txt"', "text/plain; charset=utf-8"),
        ({"a": 1}, None, 'inline; filename="task-{}.json"', "application/json; charset=utf-8"),
        (b"\x89PNG\r\n", "image/png", 'inline; filename="task-{}.png"', "image/png"),
        ("<script>alert(1)</script>", "text/html", 'attachment; filename="task-{}.html"', "text/html; charset=utf-8"),
        ("<svg onload=alert(1)/>", "image/svg+xml", 'attachment; filename="task-{}.svg"', "image/svg+xml; charset=utf-8"),
        ("<a/>", "application/xml", 'attachment; filename="task-{}.xml"', "application/xml; charset=utf-8"),
        (b"x", "text/html\r\nX-Evil: 1", 'attachment; filename="task-{}.bin"', "application/octet-stream"),
    ],
)
def test_responses_are_shown_only_when_harmless(staff, noop_type, data, content_type, disposition, served_type):
    task = TaskFactory(type=noop_type, status=Status.FINISHED)
    atp.set_response(task, data, content_type)
    response = staff.get(f"/atp/tasks/{task.pk}/response")
    assert response["Content-Disposition"] == disposition.format(task.pk)
    assert response["Content-Type"] == served_type
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Content-Security-Policy"].startswith("sandbox")


def test_buttons_match_the_state_and_report_refusals(staff, noop_type):
    running = TaskFactory(type=noop_type, status=Status.RUNNING)
    page = staff.get(f"/atp/tasks/{running.pk}/").content.decode()
    buttons = re.findall(r'action="/atp/tasks/\d+/(\w+)/"', page)
    assert buttons == ["reenqueue", "pause", "cancel"]
    finished = TaskFactory(type=noop_type, status=Status.FINISHED)
    assert "atp-buttons" not in staff.get(f"/atp/tasks/{finished.pk}/").content.decode()
    response = staff.post(f"/atp/tasks/{finished.pk}/cancel/", follow=True)
    assert f"Task #{finished.pk} was not cancelled: already finished." in response.content.decode()
    response = staff.post(f"/atp/tasks/{running.pk}/pause/", follow=True)
    assert f"Task #{running.pk} paused." in response.content.decode()


def test_a_view_only_user_sees_no_buttons(log_in, noop_type):
    client = log_in("view only")
    running = TaskFactory(type=noop_type, status=Status.RUNNING)
    assert "atp-buttons" not in client.get(f"/atp/tasks/{running.pk}/").content.decode()


def test_a_handler_exception_is_shown_escaped(log_in, daemon):
    client = log_in("superuser")
    atp.register_task_type("tests.fail", "tests.handlers.fail")
    task = claim_exactly(atp.enqueue("tests.fail", {"message": "<script>alert('x')</script>"}), daemon)
    run_task(task.pk, task.attempt, task.type.handler)
    record = LogRecord.objects.get(instance=task, message__contains="<script>")
    for url in (f"/atp/tasks/{task.pk}/", f"/atp/tasks/{task.pk}/?partial=1",
                f"/admin/atp/instance/{task.pk}/change/",
                f"/admin/atp/logrecord/{record.pk}/change/"):
        response = client.get(url)
        assert response.status_code == 200, url
        page = response.content.decode()
        assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page, url
        assert "<script>alert(" not in page, url
