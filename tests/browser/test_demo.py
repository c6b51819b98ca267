"""A newcomer's walk through the demo: each scenario started from the start page, with
a real daemon, seen playing out in a real browser under atp's Content-Security-Policy."""

import re

import pytest
from playwright.sync_api import expect

from atp.models import Instance
from atp.states import Status
from atp_demo import scenarios
from tests.demo.site import use_demo_site

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

#: Milliseconds a scenario may take to play out in a test (the demo's own pace is slower).
PLAYS_OUT_MS = 60_000


@pytest.fixture
def start_page(settings, monkeypatch, logged_in, live_server):
    """The demo's start page, logged in; it fails the test on any policy violation."""
    use_demo_site(settings, monkeypatch)
    violations = []
    logged_in.on("console", lambda message: violations.append(message.text)
                 if "Content Security Policy" in message.text else None)
    logged_in.goto(f"{live_server.url}/")
    yield logged_in
    assert violations == []


def start(page, button):
    with page.expect_navigation():
        page.get_by_role("button", name=button).click()


def test_the_start_page_links_to_the_dashboard_and_the_admin(start_page, live_server):
    expect(start_page.locator("#demo-intro")).to_contain_text("atpd")
    start_page.locator("#demo-intro").get_by_role("link", name="atp's dashboard").click()
    start_page.wait_for_url(f"{live_server.url}/atp/")
    start_page.go_back()
    start_page.locator("#demo-intro").get_by_role("link", name="the Django admin").click()
    start_page.wait_for_url(f"{live_server.url}/admin/")


def test_the_quilt_fills_in_live_some_squares_red_until_the_batch_completes(start_page, start_daemon):
    start(start_page, "Start the quilt")
    expect(start_page.locator(".demo-square")).to_have_count(64)
    expect(start_page.locator("#quilt-spinner")).to_be_visible()
    start_daemon("--workers", 3)
    # Squares coloured while the batch still runs: it fills in live.
    start_page.wait_for_function(
        "() => document.querySelectorAll('.demo-square.demo-finished').length > 0"
        " && !document.getElementById('quilt-spinner').hidden", timeout=PLAYS_OUT_MS)
    expect(start_page.locator("#quilt-spinner")).to_be_hidden(timeout=PLAYS_OUT_MS)
    expect(start_page.locator(".demo-square.demo-failed")).to_have_count(scenarios.QUILT_FAILURES)
    expect(start_page.locator(".demo-square.demo-finished")).to_have_count(64 - scenarios.QUILT_FAILURES)
    red = start_page.locator(".demo-square.demo-failed").first.evaluate(
        "square => getComputedStyle(square).backgroundColor")
    coloured = start_page.locator(".demo-square.demo-finished").first.evaluate(
        "square => square.style.backgroundColor")
    assert red == "rgb(186, 33, 33)" and coloured.startswith("rgb(")
    expect(start_page.locator("#quilt-summary")).to_contain_text("the batch is complete")
    completion = start_page.locator("#quilt-completion")
    with start_page.expect_navigation():
        completion.click()
    expect(start_page.locator("#atp-task-state")).to_have_text("finished")
    expect(start_page.locator("h1")).to_contain_text("demo.quilt.done")


def test_the_processing_job_reports_progress_and_shows_its_image(start_page, start_daemon):
    start(start_page, "Render a fractal")
    expect(start_page.locator("h1")).to_contain_text("demo.fractal")
    start_daemon("--workers", 1)
    image = start_page.locator("#atp-response-image")
    expect(image).to_be_visible(timeout=PLAYS_OUT_MS)
    start_page.wait_for_function("() => document.getElementById('atp-response-image').complete")
    size = image.evaluate("image => [image.naturalWidth, image.naturalHeight]")
    assert size == [scenarios.FRACTAL["width"], scenarios.FRACTAL["height"]]
    [job] = Instance.objects.filter(type__identifier="demo.fractal")
    height = scenarios.FRACTAL["height"]
    assert (job.progress_done, job.progress_total) == (height, height)
    expect(start_page.locator("#atp-task-state")).to_have_text("finished")


def test_the_flaky_task_succeeds_after_two_retries_in_its_history(start_page, start_daemon):
    start(start_page, "Start a flaky task")
    start_daemon("--workers", 1)
    expect(start_page.locator("#atp-task-state")).to_have_text("finished", timeout=PLAYS_OUT_MS)
    timeline = start_page.locator("#atp-timeline")
    expect(timeline.locator("tr", has_text="ConnectionError")).to_have_count(2)
    expect(timeline).to_contain_text(re.compile(r"retry 1 \(retry_limit 3\)"))
    expect(timeline).to_contain_text(re.compile(r"retry 2 \(retry_limit 3\)"))


def test_the_hanging_task_fails_once_its_restarts_are_spent(start_page, start_daemon):
    start(start_page, "Start a hanging task")
    start_daemon("--workers", 1)
    expect(start_page.locator("#atp-task-state")).to_have_text("failed", timeout=PLAYS_OUT_MS)
    timeline = start_page.locator("#atp-timeline")
    expect(timeline).to_contain_text("restart 1 of 2")
    expect(timeline).to_contain_text("restart 2 of 2")
    expect(timeline).to_contain_text("restart limit reached (2 restarts)")
    [task] = Instance.objects.filter(type__identifier="demo.hang")
    assert (task.status, task.restarts) == (Status.FAILED, 2)


def test_the_rate_limited_tasks_and_the_schedule_run(start_page, live_server, start_daemon):
    start(start_page, "Enqueue them")
    start_daemon("--workers", 2)
    rows = start_page.locator("#atp-tasks tbody tr", has_text="demo.limited")
    expect(rows).to_have_count(scenarios.LIMITED_TASKS)
    limited = Instance.objects.filter(type__identifier="demo.limited")
    wait_for(lambda: all(task.status == Status.FINISHED for task in limited.all()))
    start_page.goto(f"{live_server.url}/")
    start(start_page, "Start the schedule")
    wait_for(lambda: Instance.objects.filter(type__identifier="demo.tick",
                                             status=Status.FINISHED).count() >= 2)
    start_page.goto(f"{live_server.url}/")
    start(start_page, "Stop the schedule")
    expect(start_page.locator(".atp-messages")).to_contain_text("The schedule demo-tick is deleted.")


def wait_for(condition):
    from tests.processes import wait_until

    wait_until(condition, timeout=PLAYS_OUT_MS / 1000, message="the scenario playing out")
