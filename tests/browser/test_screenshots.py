"""The screenshots in docs/images: the pages of a busy system, taken by ``make screenshots``."""

import datetime
import os

import pytest
from playwright.sync_api import expect

import atp
from atp.models import Instance
from atp.states import Status
from tests.browser.conftest import screenshot
from tests.factories import TaskFactory
from tests.processes import wait_until

pytestmark = [
    pytest.mark.slow, pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not os.environ.get("ATP_SCREENSHOTS"), reason="set ATP_SCREENSHOTS to a folder"),
]


def ran_over_the_last_hour(identifiers, count=360):
    """Tasks that ran one after the other over the last hour, a backlog half an hour ago
    and a few failures and retries, so that the charts have a past to draw: each is run
    through the queue verbs, then its history moved back in time."""
    from django.db.models import F

    from atp import engine
    from atp.models import LogRecord, Type

    types = [Type.objects.get(identifier=identifier) for identifier in identifiers]
    daemon = engine.register_daemon(workers=3)
    for n in range(count):
        status = Status.FAILED if n % 37 == 5 or n % 29 == 3 else Status.FINISHED
        task = TaskFactory(type=types[n % len(types)], status=status, daemon=daemon)
        if n % 29 == 3:  # retried by an operator, then cancelled
            atp.reenqueue(task)
            atp.cancel(task)
        ago = datetime.timedelta(seconds=3600 * (count - n) / count)
        backlog = datetime.timedelta(seconds=max(0, 240 - abs(n - count // 2) * 6) + 0.2 * (n % 7))
        records = LogRecord.objects.filter(instance=task)
        records.filter(status=Status.ACCEPTED, attempt=0).update(time=F("time") - ago - backlog)
        records.exclude(status=Status.ACCEPTED, attempt=0).update(time=F("time") - ago)
        Instance.objects.filter(pk=task.pk).update(
            created=F("created") - ago - backlog, started=F("started") - ago,
            finished=F("finished") - ago)
    engine.retire_daemon(daemon)


def test_screenshots_of_a_busy_system(logged_in, live_server, start_daemon):
    from atp.engine import sync_declared_types
    from atp.models import Type

    Type.objects.filter(identifier__startswith="tests.").delete()  # the test suite's own
    sync_declared_types()
    Type.objects.filter(identifier__startswith="tests.").delete()
    ran_over_the_last_hour(["demo.render", "demo.primes"])
    for number in range(6):
        atp.enqueue("demo.render", {"title": f"chart {number}", "values": [number, 3, 5, 2]})
        atp.enqueue("demo.primes", {"limit": 50_000 * (number + 1)})
    atp.enqueue("demo.fail", {"reason": "the input file is missing"})
    atp.enqueue("demo.fail", {"reason": "<b>markup</b> in an error stays text"})
    watched = atp.enqueue("demo.sleep", {"seconds": 30}, identifier="nightly-report", priority=-1)
    for seconds in (20, 25, 40):
        atp.enqueue("demo.sleep", {"seconds": seconds}, priority=-2)
    atp.enqueue("demo.sleep", {"seconds": 5}, countdown=3600, identifier="tomorrow")
    daemon = start_daemon("--workers", 3)
    wait_until(lambda: Instance.objects.filter(status=Status.RUNNING).count() == 3, timeout=60,
               message="three tasks running", output=daemon.output)
    wait_until(lambda: (Instance.objects.get(pk=watched.pk).progress_done or 0) >= 4, timeout=60,
               message="progress")
    Type.objects.filter(identifier__startswith="tests.").delete()  # declared again by the daemon

    logged_in.goto(f"{live_server.url}/atp/")
    expect(logged_in.locator("#atp-daemons")).to_contain_text("3")
    screenshot(logged_in, "dashboard")
    charts = logged_in.locator("#atp-charts")
    charts.scroll_into_view_if_needed()
    if os.environ.get("ATP_SCREENSHOTS"):
        charts.screenshot(path=os.path.join(os.environ["ATP_SCREENSHOTS"], "charts.png"))
    logged_in.goto(f"{live_server.url}/atp/tasks/{watched.pk}/")
    screenshot(logged_in, "task-detail")
    logged_in.goto(f"{live_server.url}/admin/atp/instance/")
    logged_in.click("#toggle-nav-sidebar")
    screenshot(logged_in, "admin-changelist")
    failed = Instance.objects.filter(status=Status.FAILED).first()
    logged_in.goto(f"{live_server.url}/admin/atp/instance/{failed.pk}/change/")
    screenshot(logged_in, "admin-task")
    daemon.stop()


def test_screenshot_of_the_quilt_mid_run(settings, monkeypatch, logged_in, live_server,
                                         start_daemon):
    from atp_demo import scenarios
    from tests.demo.site import use_demo_site

    use_demo_site(settings, monkeypatch)
    monkeypatch.setattr(scenarios, "QUILT_SECONDS", (0.5, 3.0))  # the demo's own pace
    logged_in.set_viewport_size({"width": 1366, "height": 800})
    logged_in.goto(f"{live_server.url}/")
    with logged_in.expect_navigation():
        logged_in.get_by_role("button", name="Start the quilt").click()
    start_daemon("--workers", 3)
    # Filling in, a red square among the coloured ones, the batch still running.
    logged_in.wait_for_function(
        "() => document.querySelectorAll('.demo-square.demo-finished').length >= 20"
        " && document.querySelectorAll('.demo-square.demo-failed').length >= 1"
        " && !document.getElementById('quilt-spinner').hidden", timeout=120_000)
    screenshot(logged_in, "quilt")
