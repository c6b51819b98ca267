import re

import pytest

import atp
from atp.states import Status
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


def test_a_types_page_shows_its_tasks_queue_parameters_and_charts(log_in, noop_type, daemon):
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    for status in (Status.ACCEPTED, Status.ACCEPTED, Status.RUNNING, Status.FINISHED):
        TaskFactory(type=noop_type, status=status, daemon=daemon)
    TaskFactory(type=atp.get_type("tests.echo"), status=Status.FINISHED, daemon=daemon)
    page = log_in("view only").get(f"/atp/types/{noop_type.pk}/").content.decode()
    assert "<h1>Type tests.noop</h1>" in page
    row = re.search(r'<table class="atp-table" id="atp-type-states">.*?<tbody>(.*?)</tbody>', page, re.S).group(1)
    assert [int(n) for n in re.findall(r">(\d+)<", row)] == [2, 0, 1, 0, 1, 0, 0]
    assert "tests.handlers.noop" in page and "at most 3" in page
    finished = sum(int(n) for n in re.findall(r'data-finished="(\d+)"', page))
    assert finished == 1  # its own task, not echo's
    assert re.findall(r'data-depth="(\d+)"', page)[-1] == "2"
    assert f'data-atp-refresh="/atp/types/{noop_type.pk}/?partial=1&amp;window=hour"' in page


def test_the_dashboard_links_each_type_to_its_page(log_in, noop_type):
    page = log_in("view only").get("/atp/").content.decode()
    assert f'<a href="/atp/types/{noop_type.pk}/">tests.noop</a>' in page


def test_an_unknown_type_or_window_is_refused(log_in, noop_type):
    client = log_in("view only")
    assert client.get("/atp/types/999999/").status_code == 404
    answer = client.get(f"/atp/types/{noop_type.pk}/?window=week")
    assert answer.status_code == 400 and b"unknown window 'week'" in answer.content
    assert client.get("/atp/?window=week").status_code == 400


def test_a_button_pressed_on_a_types_page_comes_back_to_it(log_in, noop_type):
    operator = log_in("superuser")
    page = operator.get(f"/atp/types/{noop_type.pk}/").content.decode()
    assert f'action="/atp/types/{noop_type.pk}/pause/"' in page and 'name="back" value="type"' in page
    answer = operator.post(f"/atp/types/{noop_type.pk}/pause/", {"back": "type"})
    assert answer.status_code == 302 and answer["Location"] == f"/atp/types/{noop_type.pk}/"
    assert atp.get_type("tests.noop").is_paused
    assert operator.post(f"/atp/types/{noop_type.pk}/resume/")["Location"] == "/atp/"
