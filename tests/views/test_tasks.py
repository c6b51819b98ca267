import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

import atp
from atp import engine
from atp.daemon.execution import run_task
from atp.models import Instance, LogRecord
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


def buttons_of(page):
    """Return the verbs of a task page's buttons, those greyed in capitals."""
    found = re.findall(r'action="/atp/tasks/\d+/([\w-]+)/"[^>]*>.*?<button([^>]*)>', page, re.S)
    return [verb.upper() if " disabled" in button else verb for verb, button in found]


def test_buttons_are_greyed_when_the_state_does_not_allow_them(staff, noop_type):
    running = TaskFactory(type=noop_type, status=Status.RUNNING)
    page = staff.get(f"/atp/tasks/{running.pk}/").content.decode()
    # No delete: "can change" may not delete.
    assert buttons_of(page) == ["reenqueue", "pause", "RESUME", "RUN-NOW", "RUN-AGAIN", "cancel"]
    partial = staff.get(f"/atp/tasks/{running.pk}/?partial=1").content.decode()
    assert buttons_of(partial) == buttons_of(page)  # in the live part: they follow the state
    finished = TaskFactory(type=noop_type, status=Status.FINISHED)
    page = staff.get(f"/atp/tasks/{finished.pk}/").content.decode()
    assert buttons_of(page) == ["REENQUEUE", "PAUSE", "RESUME", "RUN-NOW", "run-again", "CANCEL"]
    response = staff.post(f"/atp/tasks/{finished.pk}/cancel/", follow=True)
    assert f"Task #{finished.pk} was not cancelled: already finished." in response.content.decode()
    response = staff.post(f"/atp/tasks/{running.pk}/pause/", follow=True)
    assert f"Task #{running.pk} paused." in response.content.decode()


def test_cancel_and_delete_ask_first(log_in, noop_type):
    client = log_in("superuser")
    task = TaskFactory(type=noop_type, status=Status.FAILED)
    page = client.get(f"/atp/tasks/{task.pk}/").content.decode()
    assert f'/delete/" data-atp-confirm="Delete task #{task.pk} with its inputs' in page
    assert f'/cancel/" data-atp-confirm="Cancel task #{task.pk}?"' in page
    response = client.post(f"/atp/tasks/{task.pk}/delete/", follow=True)
    assert f"Task #{task.pk} deleted." in response.content.decode()
    assert not Instance.objects.filter(pk=task.pk).exists()


def test_delete_takes_the_delete_permission(staff, noop_type):
    task = TaskFactory(type=noop_type, status=Status.FAILED)
    assert staff.post(f"/atp/tasks/{task.pk}/delete/").status_code == 403
    assert Instance.objects.filter(pk=task.pk).exists()


def test_run_again_opens_the_new_task_and_leaves_the_old(staff, noop_type):
    old = TaskFactory(type=noop_type, status=Status.FAILED, inputs={"n": 1})
    response = staff.post(f"/atp/tasks/{old.pk}/run-again/", follow=True)
    new = Instance.objects.exclude(pk=old.pk).get()
    assert response.redirect_chain[-1][0] == f"/atp/tasks/{new.pk}/"
    assert f"Task #{old.pk} queued again as task #{new.pk}." in response.content.decode()
    assert Instance.objects.get(pk=old.pk).status == Status.FAILED
    running = TaskFactory(type=noop_type, status=Status.RUNNING)
    response = staff.post(f"/atp/tasks/{running.pk}/run-again/", follow=True)
    assert f"Task #{running.pk} was not queued again: running." in response.content.decode()


def test_a_delayed_task_shows_its_eta_and_runs_now(staff, noop_type, settings):
    settings.TIME_ZONE = "Europe/Paris"
    delayed = TaskFactory(type=noop_type, countdown=3600)
    page = staff.get(f"/atp/tasks/{delayed.pk}/").content.decode()
    eta = re.search(r'id="atp-task-eta">([^<]+)<', page).group(1)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} CES?T", eta)
    assert "run-now" in buttons_of(page)
    response = staff.post(f"/atp/tasks/{delayed.pk}/run-now/", follow=True)
    page = response.content.decode()
    assert f"Task #{delayed.pk} made runnable now." in page
    assert "atp-task-eta" not in page and "RUN-NOW" in buttons_of(page)
    response = staff.post(f"/atp/tasks/{delayed.pk}/run-now/", follow=True)
    assert f"Task #{delayed.pk} was not made runnable now: not delayed." in response.content.decode()


def test_a_task_that_expires_shows_when_and_one_snoozed_how_often(staff, noop_type, daemon):
    from atp import engine

    expiring = atp.enqueue("tests.noop", expires=3600)
    page = staff.get(f"/atp/tasks/{expiring.pk}/").content.decode()
    shown = re.search(r'id="atp-task-expires">([^<]+)<', page).group(1)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC", shown)
    claimed = engine.dequeue(daemon)[0]
    engine.start(claimed, attempt=claimed.attempt, daemon=daemon)
    engine.snooze(claimed.pk, 60, attempt=claimed.attempt, daemon=daemon)
    page = staff.get(f"/atp/tasks/{expiring.pk}/").content.decode()
    assert "snoozed 1 time)" in page
    assert "atp-task-expires" not in staff.get(
        f"/atp/tasks/{atp.enqueue('tests.noop').pk}/").content.decode()


def test_a_re_enqueued_task_no_longer_names_its_old_daemon(staff, noop_type, daemon):
    task = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)
    assert str(daemon) in staff.get(f"/atp/tasks/{task.pk}/").content.decode()
    atp.reenqueue(task)
    page = staff.get(f"/atp/tasks/{task.pk}/").content.decode()
    assert re.search(r'id="atp-task-daemon" class="atp-wrap">—<', page)
    assert str(daemon) not in staff.get("/atp/tasks/").content.decode()


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


def test_a_failed_task_shows_its_error_in_the_list_and_its_json(staff, daemon):
    atp.register_task_type("tests.fail", "tests.handlers.fail", max_restarts=0)
    task = claim_exactly(atp.enqueue("tests.fail", {"message": "disk <full>"}), daemon)
    run_task(task.pk, task.attempt, task.type.handler)
    page = staff.get("/atp/tasks/?q=tests.fail").content.decode()
    assert re.search(r'class="atp-error-excerpt"[^>]*>[^<]*ValueError: disk &lt;full&gt;</div>', page)
    status = staff.get(f"/atp/tasks/{task.pk}.json").json()
    assert status["status"] == "FAILED" and "ValueError: disk <full>" in status["error"]
    running = TaskFactory(type=task.type, status=Status.RUNNING)
    assert staff.get(f"/atp/tasks/{running.pk}.json").json()["error"] is None


def test_a_task_waiting_for_a_semaphore_says_which_and_who_holds_it(staff, noop_type, daemon):
    from atp import engine

    holder = atp.enqueue("tests.noop", hold=["account-42"])
    waiting = atp.enqueue("tests.noop", hold=["account-42", "gpu"])
    engine.dequeue(daemon)  # the holder: the mutex is taken
    page = staff.get(f"/atp/tasks/{waiting.pk}/").content.decode()
    shown = re.sub(r"<[^>]+>", "", re.search(
        r'id="atp-task-semaphores"[^>]*>(.*?)</dd>', page, re.S).group(1))
    assert shown == f"waiting for account-42, held by task #{holder.pk}; gpu: 0 of 1 taken"
    assert f'href="/atp/tasks/{holder.pk}/"' in page
    page = staff.get(f"/atp/tasks/{holder.pk}/").content.decode()
    assert "account-42: 1 of 1 taken" in page
    assert "atp-task-semaphores" not in staff.get(
        f"/atp/tasks/{atp.enqueue('tests.noop').pk}/").content.decode()


def test_the_dashboard_counts_tasks_held_back_by_a_semaphore_apart(staff, noop_type, daemon):
    from atp import engine

    atp.register_task_type("tests.api", "tests.handlers.noop", key_rate="1/m", key_bucket_size=1)
    atp.enqueue("tests.noop", hold=["account-42"])
    atp.enqueue("tests.noop", hold=["account-42"])  # waits for the mutex
    atp.enqueue("tests.noop")  # waits for a worker
    atp.enqueue_many("tests.api", [1, 2], key="token-1")  # one waits for the key's token
    engine.dequeue(daemon, limit=5)
    atp.enqueue("tests.noop")
    page = staff.get("/atp/").content.decode()
    held_back = re.search(r'id="atp-held-back"><div class="atp-value">(\d+)<', page).group(1)
    assert held_back == "2"
    runnable = re.search(r'<div class="atp-value">(\d+)</div><div class="atp-label">waiting to run',
                         page).group(1)
    assert runnable == "1"
