"""The charts of the dashboard and of a type's page, in a real browser, with a real daemon:
their figures are those of the tasks the test ran, and they follow the queue live."""

import os
from collections import Counter

import pytest
from playwright.sync_api import expect

import atp
from atp.models import Instance
from atp.states import Status
from tests.processes import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def points(page, chart):
    """Return the figures of each point of ``chart`` (its SVG's data attributes)."""
    return page.eval_on_selector_all(
        f"#atp-chart-{chart} rect.atp-point", "rects => rects.map(r => Object.assign({}, r.dataset))")


def total(page, chart, name):
    return sum(int(point[name] or 0) for point in points(page, chart))


def by_minute(status, type_identifier):
    """Return ``{minute (ISO, UTC): count}`` of the tasks of a type that ended in ``status``."""
    ends = Instance.objects.filter(status=status, type__identifier=type_identifier).values_list("finished", flat=True)
    return Counter(end.replace(second=0, microsecond=0).isoformat() for end in ends)


def ended(count):
    return lambda: Instance.objects.filter(status__in=(Status.FINISHED, Status.FAILED)).count() == count


def test_the_dashboard_charts_the_tasks_a_daemon_ran_and_follow_it_live(logged_in, live_server, start_daemon):
    atp.register_task_type("tests.noop", "tests.handlers.noop")
    atp.register_task_type("tests.fail", "tests.handlers.fail")
    atp.enqueue_many("tests.noop", [{}] * 5)
    atp.enqueue_many("tests.fail", [{}] * 2)
    logged_in.goto(f"{live_server.url}/atp/")
    assert points(logged_in, "depth")[-1]["depth"] == "7"  # all waiting, none claimed
    logged_in.evaluate("window.stillTheSamePage = true")
    daemon = start_daemon("--workers", 2)
    wait_until(ended(7), timeout=60, message="7 tasks ended", output=daemon.output)
    # The page updates itself: the last minute's points count the tasks, by the minute
    # they ended in, the queue is empty again, and every ended task has a wait.
    expect(logged_in.locator("#atp-chart-throughput")).to_have_attribute("id", "atp-chart-throughput")
    wait_until(lambda: total(logged_in, "throughput", "finished") == 5, timeout=20, message="5 finished")
    shown = {point["start"]: point for point in points(logged_in, "throughput")}
    for minute, count in by_minute(Status.FINISHED, "tests.noop").items():
        assert int(shown[minute]["finished"]) == count
    for minute, count in by_minute(Status.FAILED, "tests.fail").items():
        assert int(shown[minute]["failed"]) == count
    assert total(logged_in, "throughput", "failed") == 2
    assert points(logged_in, "depth")[-1]["depth"] == "0"
    assert total(logged_in, "wait", "ended") == 7
    last = [point for point in points(logged_in, "wait") if point["ended"] != "0"][-1]
    assert 0 < float(last["p50"]) <= float(last["p95"])
    title = logged_in.locator("#atp-chart-throughput rect.atp-point title").last.text_content()
    assert "finished" in title and "UTC" in title
    # More work, while the page stays open: its charts follow.
    atp.enqueue_many("tests.noop", [{}] * 3)
    wait_until(ended(10), timeout=60, message="10 tasks ended", output=daemon.output)
    wait_until(lambda: total(logged_in, "throughput", "finished") == 8, timeout=20, message="8 finished")
    assert logged_in.evaluate("window.stillTheSamePage") is True
    daemon.stop()


def test_a_types_page_charts_only_its_tasks_over_an_hour_or_a_day(logged_in, live_server, start_daemon):
    atp.register_task_type("tests.noop", "tests.handlers.noop")
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    atp.enqueue_many("tests.noop", [{}] * 4)
    atp.enqueue_many("tests.echo", [{}] * 2)
    daemon = start_daemon("--workers", 2)
    wait_until(ended(6), timeout=60, message="6 tasks ended", output=daemon.output)
    logged_in.goto(f"{live_server.url}/atp/")
    with logged_in.expect_navigation():
        logged_in.locator("#atp-type-counts a", has_text="tests.echo").click()
    expect(logged_in.locator("h1")).to_have_text("Type tests.echo")
    assert total(logged_in, "throughput", "finished") == 2
    assert len(points(logged_in, "throughput")) == 60
    with logged_in.expect_navigation():
        logged_in.locator(".atp-switch a", has_text="last day").click()
    expect(logged_in.locator(".atp-switch .atp-current")).to_have_text("last day")
    day = points(logged_in, "throughput")
    assert len(day) == 96 and sum(int(point["finished"]) for point in day) == 2
    assert "window=day" in logged_in.get_attribute("[data-atp-refresh]", "data-atp-refresh")
    daemon.stop()


@pytest.mark.parametrize("width", [1366, 800])
def test_the_charts_are_readable_at_the_widths_operators_use(browser, live_server, django_user_model, width):
    django_user_model.objects.create_superuser("operator", password="operator-pw")
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.goto(f"{live_server.url}/admin/login/?next=/atp/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "operator-pw")
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/atp/")
    for chart in ("throughput", "depth", "wait"):
        svg = page.locator(f"#atp-chart-{chart} svg")
        box = svg.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= width
        # The drawing scales with the width it is given: its 12-unit text stays legible.
        label = page.locator(f"#atp-chart-{chart} .atp-y-label").first.bounding_box()
        assert label["height"] >= 10
    if os.environ.get("ATP_CHART_SHOTS"):
        page.screenshot(path=os.path.join(os.environ["ATP_CHART_SHOTS"], f"charts-{width}.png"), full_page=True)
    context.close()
