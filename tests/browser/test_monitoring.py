"""An operator's walk through the pages, in a real browser, with a real daemon."""

import re

import pytest
from playwright.sync_api import expect

import atp
from atp.models import Instance
from atp.states import Status
from tests.factories import TaskFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_an_operator_logs_in_and_reads_the_dashboard(logged_in, live_server, noop_type):
    atp.enqueue_many("tests.noop", [{}] * 3)
    logged_in.goto(f"{live_server.url}/atp/")
    row = logged_in.locator("#atp-type-counts tr", has_text="tests.noop")
    expect(row.locator("td").nth(1)).to_have_text("3")
    expect(logged_in.locator(".atp-figure", has_text="waiting to run")).to_contain_text("3")


def test_the_admin_list_is_filtered_with_a_dropdown(logged_in, live_server, noop_type):
    failed = TaskFactory(type=noop_type, status=Status.FAILED)
    TaskFactory(type=noop_type, status=Status.FINISHED)
    TaskFactory(type=noop_type)
    logged_in.goto(f"{live_server.url}/admin/atp/instance/")
    expect(logged_in.locator("#result_list tbody tr")).to_have_count(3)
    status_filter = logged_in.locator("#changelist-filter select").nth(1)
    with logged_in.expect_navigation():
        status_filter.select_option(label="failed")
    expect(logged_in.locator("#result_list tbody tr")).to_have_count(1)
    expect(logged_in.locator("#result_list tbody")).to_contain_text(str(failed.pk))


def test_a_tasks_timeline_grows_while_a_daemon_runs_it(logged_in, live_server, start_daemon):
    atp.register_task_type("tests.sleep", "tests.handlers.sleep")
    task = atp.enqueue("tests.sleep", {"seconds": 4, "progress": True})
    logged_in.goto(f"{live_server.url}/atp/tasks/{task.pk}/")
    expect(logged_in.locator("#atp-timeline tbody tr")).to_have_count(1)
    logged_in.evaluate("window.stillTheSamePage = true")
    daemon = start_daemon("--workers", 1)
    running = logged_in.locator("#atp-timeline .atp-status-running")
    expect(running).to_have_count(1, timeout=30_000)
    expect(logged_in.locator("#atp-task-state")).to_have_text("running")
    expect(logged_in.locator("#atp-timeline .atp-status-finished")).to_have_count(1, timeout=30_000)
    expect(logged_in.locator("#atp-timeline tbody tr")).to_have_count(4)
    assert logged_in.evaluate("window.stillTheSamePage") is True  # updated in place
    assert Instance.objects.get(pk=task.pk).status == Status.FINISHED
    daemon.stop()


def test_a_failed_task_is_re_enqueued_from_the_admin(logged_in, live_server, noop_type):
    failed = TaskFactory(type=noop_type, status=Status.FAILED)
    logged_in.goto(f"{live_server.url}/admin/atp/instance/")
    logged_in.check(f"input[name=_selected_action][value='{failed.pk}']")
    logged_in.select_option("select[name=action]", "reenqueue_tasks")
    with logged_in.expect_navigation():
        logged_in.click("button[name=index]")
    expect(logged_in.locator("#atp-action-count")).to_contain_text("Re-enqueue 1 selected task")
    assert Instance.objects.get(pk=failed.pk).status == Status.FAILED  # asked first
    with logged_in.expect_navigation():
        logged_in.get_by_role("button", name="Yes, re-enqueue 1 task").click()
    expect(logged_in.locator(".messagelist")).to_contain_text("1 re-enqueued")
    assert Instance.objects.get(pk=failed.pk).status == Status.ACCEPTED
    row = logged_in.locator("#result_list tbody tr", has_text=re.compile(rf"^\s*{failed.pk}\b"))
    expect(logged_in.locator("#result_list")).to_contain_text("accepted")
    assert row is not None


def test_a_purge_from_the_dashboard_asks_first(logged_in, live_server, noop_type):
    atp.enqueue_many("tests.noop", [{}] * 2)
    logged_in.goto(f"{live_server.url}/atp/")
    row = logged_in.locator("#atp-type-counts tr", has_text="tests.noop")
    logged_in.once("dialog", lambda dialog: dialog.dismiss())
    row.get_by_role("button", name="Purge").click()
    expect(row.locator("td").nth(1)).to_have_text("2")  # still waiting: nothing was sent
    assert set(Instance.objects.values_list("status", flat=True)) == {Status.ACCEPTED}
    logged_in.once("dialog", lambda dialog: dialog.accept())
    with logged_in.expect_navigation():
        row.get_by_role("button", name="Purge").click()
    expect(logged_in.locator("body")).to_contain_text("2 waiting task(s) cancelled")
    assert set(Instance.objects.values_list("status", flat=True)) == {Status.CANCELLED}


def test_the_pages_work_within_their_own_policy_and_run_nothing_injected(logged_in, live_server,
                                                                        noop_type):
    """atp's pages run their script and stylesheet under their Content-Security-Policy,
    and markup that found its way into a page runs nothing."""
    violations = []
    logged_in.on("console", lambda message: violations.append(message.text)
                 if "Content Security Policy" in message.text else None)
    task = atp.enqueue("tests.noop", {})
    for url in ["/atp/", "/atp/tasks/", f"/atp/tasks/{task.pk}/"]:
        response = logged_in.goto(f"{live_server.url}{url}")
        assert "script-src 'self'" in response.headers["content-security-policy"]
        header = logged_in.locator(".atp-header")
        assert header.evaluate("e => getComputedStyle(e).display") == "flex"  # atp.css applied
    # live.js refreshes the task's part in place (its content is replaced every 2 s).
    logged_in.locator("[data-atp-refresh] .atp-card").evaluate("e => e.id = 'atp-before'")
    expect(logged_in.locator("#atp-before")).to_have_count(0, timeout=10_000)
    assert violations == []
    logged_in.evaluate("""() => document.body.insertAdjacentHTML('beforeend',
        '<img src="x" onerror="window.injected = 1">')""")
    logged_in.wait_for_timeout(500)
    assert logged_in.evaluate("window.injected") is None
    assert any("inline event handler" in text for text in violations)
