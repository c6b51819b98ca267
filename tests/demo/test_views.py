import re

import pytest

from atp.models import Batch, Instance, Schedule
from atp.states import Status
from atp_demo import scenarios
from tests.demo.site import use_demo_site

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def demo_site(settings, monkeypatch):
    use_demo_site(settings, monkeypatch)


@pytest.fixture
def operator(client, django_user_model):
    django_user_model.objects.create_superuser("operator", password="pw")
    client.login(username="operator", password="pw")
    return client


def test_the_start_page_says_what_is_on_show_with_a_button_per_scenario(operator):
    page = operator.get("/")
    assert page.status_code == 200
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    html = page.content.decode()
    intro = re.search(r'<p class="demo-intro" id="demo-intro">(.*?)</p>', html, re.S).group(1)
    assert len(re.findall(r"[.!?](\s|$)", re.sub(r"<[^>]+>", "", intro))) == 3
    assert 'href="/atp/"' in intro and 'href="/admin/"' in intro
    assert "its 3 s time-out" in html and "restart limit (2)" in html  # as declared
    assert "start one every 2 s" in html
    for scenario in ("quilt", "fractal", "flaky", "hang", "limited", "ticking"):
        assert f'action="/start/{scenario}/"' in html
    assert "<script>" not in html and " style=" not in html  # nothing atp's policy refuses


def test_the_anonymous_are_sent_to_log_in(client):
    assert client.get("/").url.startswith("/admin/login/")
    assert client.post("/start/quilt/").url.startswith("/admin/login/")
    assert not Instance.objects.exists()


def test_the_quilt_is_one_batch_of_64_squares_a_few_failing_on_purpose(operator):
    answer = operator.post("/start/quilt/")
    [batch] = Batch.objects.all()
    assert answer.url == f"/quilt/{batch.pk}/"
    assert batch.on_complete == "demo.quilt.done" and batch.sealed is not None
    squares = Instance.objects.filter(batch=batch)
    assert squares.count() == 64
    assert sum(task.inputs.load()["fail"] for task in squares.select_related("inputs")) == 4
    state = operator.get(f"/quilt/{batch.pk}.json").json()
    assert [square["status"] for square in state["squares"]] == [Status.ACCEPTED] * 64
    assert state["done"] is False
    page = operator.get(answer.url).content.decode()
    assert page.count('class="demo-square"') == 64 and "atp_demo/quilt.js" in page


@pytest.mark.parametrize("scenario, type_identifier", [
    ("fractal", "demo.fractal"), ("flaky", "demo.flaky"), ("hang", "demo.hang"),
])
def test_a_single_task_scenario_shows_its_task(operator, scenario, type_identifier):
    answer = operator.post(f"/start/{scenario}/")
    [task] = Instance.objects.filter(type__identifier=type_identifier)
    assert answer.url == f"/atp/tasks/{task.pk}/"


def test_the_rate_limited_scenario_enqueues_several_at_once(operator):
    answer = operator.post("/start/limited/")
    assert Instance.objects.filter(type__identifier="demo.limited").count() == scenarios.LIMITED_TASKS
    assert answer.url == "/atp/tasks/?type=demo.limited"


def test_the_schedule_is_started_and_stopped_from_the_start_page(operator):
    assert "Start the schedule" in operator.get("/").content.decode()
    operator.post("/start/ticking/")
    [schedule] = Schedule.objects.all()
    assert (schedule.name, schedule.type.identifier) == ("demo-tick", "demo.tick")
    assert "Stop the schedule" in operator.get("/").content.decode()
    operator.post("/start/ticking/")  # again: still one
    assert Schedule.objects.count() == 1
    answer = operator.post("/start/no-more-ticks/", follow=True)
    assert not Schedule.objects.exists()
    assert "The schedule demo-tick is deleted." in answer.content.decode()


def test_an_unknown_scenario_or_quilt_is_not_found_and_starts_nothing(operator):
    assert operator.post("/start/everything/").status_code == 404
    assert operator.get("/start/quilt/").status_code == 405
    assert operator.get("/quilt/12345/").status_code == 404
    assert operator.get("/quilt/12345.json").status_code == 404
    assert not Instance.objects.exists()
