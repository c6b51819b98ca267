import re

import pytest

import atp
from atp import engine
from atp.models import Daemon, Inputs, LogRecord, Response, Task
from atp.states import Status
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("model", [LogRecord, Task, Inputs, Response, Daemon])
def test_each_list_reads_and_nothing_can_be_added_changed_or_deleted(log_in, noop_type, daemon, model):
    admin = log_in("superuser")
    task = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)
    atp.set_response(task, "r")
    name = model._meta.model_name
    page = admin.get(f"/admin/atp/{name}/").content.decode()
    assert f"/admin/atp/{name}/add/" not in page
    obj = model.objects.first()
    detail = admin.get(f"/admin/atp/{name}/{obj.pk}/change/")
    assert detail.status_code == 200
    assert 'name="_save"' not in detail.content.decode()
    assert admin.post(f"/admin/atp/{name}/{obj.pk}/delete/").status_code == 403


def test_the_lists_never_fetch_inputs_or_whole_messages(log_in, noop_type):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    admin = log_in("superuser")
    task = atp.enqueue("tests.noop", {"text": "é" * 1000})
    engine.log(task, "<b>start</b> " + "x" * 5000)
    with CaptureQueriesContext(connection) as queries:
        inputs_page = admin.get("/admin/atp/inputs/").content.decode()
        history_page = admin.get("/admin/atp/logrecord/").content.decode()
    # Measured by the database, in bytes: {"text":"…"} is 11 + 2 × 1000 (é is two bytes).
    assert ">2,011 bytes<" in inputs_page
    assert "&lt;b&gt;start&lt;/b&gt; xxx" in history_page and "x" * 100 not in history_page
    # Neither column is ever a column of the result, only inside LENGTH() or SUBSTR().
    fetched = re.compile(r'(?<![(])"atp_(inputs"\."data|logrecord"\."message)"(,| FROM)')
    assert not [q["sql"] for q in queries.captured_queries if fetched.search(q["sql"])]


def test_history_and_daemons_show_times_to_the_second_with_their_zone(log_in, noop_type, daemon):
    import re

    import atp

    task = atp.enqueue("tests.noop")
    admin = log_in("superuser")
    record = task.log_records.get()
    for url in ("/admin/atp/logrecord/", f"/admin/atp/logrecord/{record.pk}/change/",
                "/admin/atp/daemon/", "/admin/atp/task/"):
        page = admin.get(url).content.decode()
        assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", page), url
        assert " p.m." not in page and " a.m." not in page, url


def test_the_queue_counts_its_entries_by_name(log_in, noop_type):
    import atp

    atp.enqueue_many("tests.noop", [{}] * 2)
    page = log_in("superuser").get("/admin/atp/task/").content.decode()
    assert "2 queue entries" in page and "2 queue<" not in page


def test_a_tasks_history_on_its_page_says_its_time_zone(log_in, noop_type):
    import atp

    task = atp.enqueue("tests.noop")
    page = log_in("superuser").get(f"/admin/atp/instance/{task.pk}/change/").content.decode()
    assert "<th>time (UTC)</th>" in page


def test_the_semaphores_list_shows_each_limit_holders_and_waiters(log_in, daemon):
    admin = log_in("superuser")
    atp.register_task_type("tests.sync", "tests.handlers.noop", key_concurrency=2)
    atp.set_semaphore("gpu", 3)
    for _ in range(3):
        atp.enqueue("tests.sync", hold=["gpu"], key="account-1")
    atp.dequeue(daemon, limit=5)  # two run: the key allows two
    page = admin.get("/admin/atp/semaphore/").content.decode()
    rows = [{field: re.sub(r"<[^>]+>", "", text).strip() for field, text in re.findall(
        r'<t[hd] class="field-(\w+)"[^>]*>(.*?)</t[hd]>', row, re.S)}
        for row in re.findall(r"<tr[^>]*>(.*?)</tr>", page, re.S)]
    shown = {row["label"]: row for row in rows if "label" in row}
    assert (shown["gpu"]["limit_shown"], shown["gpu"]["holders"], shown["gpu"]["waiters"]) == (
        "3", "2", "1")
    key = shown["tests.sync[account-1]"]
    assert (key["limit_shown"], key["holders"], key["waiters"]) == ("2 (key_concurrency)", "2", "1")
    assert "/admin/atp/semaphore/add/" not in page
