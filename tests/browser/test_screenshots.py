"""The screenshots in docs/images: the pages of a busy system, taken by ``make screenshots``."""

import os

import pytest
from playwright.sync_api import expect

import atp
from atp.models import Instance
from atp.states import Status
from tests.browser.conftest import screenshot
from tests.processes import wait_until

pytestmark = [
    pytest.mark.slow, pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not os.environ.get("ATP_SCREENSHOTS"), reason="set ATP_SCREENSHOTS to a folder"),
]


def test_screenshots_of_a_busy_system(logged_in, live_server, start_daemon):
    from atp.engine import sync_declared_types
    from atp.models import Type

    Type.objects.filter(identifier__startswith="tests.").delete()  # the test suite's own
    sync_declared_types()
    Type.objects.filter(identifier__startswith="tests.").delete()
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
    logged_in.goto(f"{live_server.url}/atp/tasks/{watched.pk}/")
    screenshot(logged_in, "task-detail")
    logged_in.goto(f"{live_server.url}/admin/atp/instance/")
    logged_in.click("#toggle-nav-sidebar")
    screenshot(logged_in, "admin-changelist")
    failed = Instance.objects.filter(status=Status.FAILED).first()
    logged_in.goto(f"{live_server.url}/admin/atp/instance/{failed.pk}/change/")
    screenshot(logged_in, "admin-task")
    daemon.stop()
