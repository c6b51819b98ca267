"""The dashboard as an operator finds it: it fits the window, tells live daemons from
silent and dead ones, and counts only the tasks daemons would run as waiting."""

import signal

import pytest
from playwright.sync_api import expect

import atp
from atp import engine

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def assert_no_horizontal_scroll(page):
    widths = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert widths[0] <= widths[1], f"the page is {widths[0]} px wide in a {widths[1]} px window"


@pytest.fixture
def busy(noop_type):
    """Tasks of a push type, a pull type and a paused type; a schedule and an open batch."""
    atp.register_task_type("tests.a_rather_long_type_identifier.held", "tests.handlers.noop")
    atp.register_pull_type("tests.pull")
    atp.enqueue_many("tests.noop", [{}] * 2)
    atp.enqueue_many("tests.pull", [{}] * 4)
    atp.enqueue_many("tests.a_rather_long_type_identifier.held", [{}] * 3)
    engine.pause_type("tests.a_rather_long_type_identifier.held")
    atp.schedule("nightly-report", "tests.noop", cron="0 3 * * *", timezone="Europe/Paris")
    with atp.batch("tests.noop", name="import"):
        atp.enqueue_many("tests.noop", [{}] * 3)


@pytest.mark.parametrize("width", [800, 1366])
def test_the_dashboard_fits_the_window_and_its_buttons_sit_in_their_rows(logged_in, live_server, busy, width):
    logged_in.set_viewport_size({"width": width, "height": 800})
    logged_in.goto(f"{live_server.url}/atp/")
    expect(logged_in.locator("#atp-type-counts")).to_be_visible()
    assert_no_horizontal_scroll(logged_in)
    table = logged_in.locator("#atp-type-counts").bounding_box()
    assert table["x"] + table["width"] <= width
    for row in logged_in.locator("#atp-type-counts tbody tr").all():
        box, button = row.bounding_box(), row.locator("button").first.bounding_box()
        assert box["y"] <= button["y"] and button["y"] + button["height"] <= box["y"] + box["height"]


def test_pull_and_paused_tasks_are_not_counted_as_waiting(logged_in, live_server, busy):
    logged_in.goto(f"{live_server.url}/atp/")
    # 2 + the batch's 3 wait for a daemon; the pull type's 4 for a consumer; 3 are held.
    expect(logged_in.locator(".atp-figure", has_text="waiting to run").locator(".atp-value")).to_have_text("5")
    expect(logged_in.locator("#atp-pull-waiting .atp-value")).to_have_text("4")
    expect(logged_in.locator("#atp-held .atp-value")).to_have_text("3")
    held = logged_in.locator("#atp-type-counts tr", has_text="held").locator("td").nth(1)
    expect(held).to_contain_text("3 held")
    expect(logged_in.locator("#atp-schedules tr", has_text="nightly-report")).to_contain_text(
        "03:00:00 CE")  # CET or CEST: said in the schedule's own time zone
    expect(logged_in.locator("#atp-batches tr", has_text="import")).to_contain_text("0 / 3")


def test_a_killed_daemon_shows_silent_then_dead_never_live(logged_in, live_server, start_daemon, settings):
    timeout = 12  # the page refreshes every 5 s: it sees the silent half
    settings.ATP_DAEMON_TIMEOUT_SECONDS = timeout
    atp.register_task_type("tests.sleep", "tests.handlers.sleep")
    atp.enqueue_many("tests.sleep", [{"seconds": 60}] * 2)
    daemon = start_daemon("--workers", 2, ATP_DAEMON_TIMEOUT_SECONDS=timeout)
    logged_in.goto(f"{live_server.url}/atp/")
    live = logged_in.locator("#atp-daemons tr.atp-daemon-live")
    expect(live).to_contain_text("live", timeout=30_000)
    expect(live.locator("td").nth(4)).to_have_text("2", timeout=30_000)
    daemon.signal(signal.SIGKILL)
    silent = logged_in.locator("#atp-daemons tr.atp-daemon-silent")
    expect(silent).to_contain_text("silent since", timeout=timeout * 1000)
    expect(logged_in.locator(".atp-figure", has_text="live daemons").locator(".atp-value")).to_have_text("1")
    dead = logged_in.locator("#atp-daemons tr.atp-daemon-dead")
    expect(dead).to_contain_text("dead", timeout=timeout * 1000)
    expect(dead.locator("td").nth(4)).to_have_text("2")  # the tasks it held, until reaped
    expect(logged_in.locator(".atp-figure", has_text="live daemons").locator(".atp-value")).to_have_text("0")
    expect(logged_in.locator("#atp-daemons tr.atp-daemon-live")).to_have_count(0)
