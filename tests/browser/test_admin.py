"""The admin as an operator finds it at 1366 × 800: the task list without a horizontal
scroll bar, its filters alike, and a task's page with the list's actions as buttons."""

import pytest
from playwright.sync_api import expect

import atp
from atp import engine
from atp.models import Instance
from atp.states import Status
from tests.factories import TaskFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def admin_page(logged_in):
    logged_in.set_viewport_size({"width": 1366, "height": 800})
    return logged_in


def test_the_task_list_fits_with_every_column_in_sight(admin_page, live_server, noop_type, daemon):
    atp.register_task_type("reports.render_monthly_statements", "tests.handlers.noop")
    long_type = atp.get_type("reports.render_monthly_statements")
    failed = TaskFactory(type=long_type, status=Status.FAILED, daemon=daemon,
                         identifier="statement-2026-11-" + "x" * 60)
    running = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)
    engine.set_progress(running, 3, 4, attempt=running.attempt)
    TaskFactory(type=noop_type, status=Status.FINISHED, daemon=daemon)
    admin_page.goto(f"{live_server.url}/admin/atp/instance/")
    expect(admin_page.locator("#result_list")).to_be_visible()
    widths = admin_page.evaluate("""[document.documentElement.scrollWidth, document.documentElement.clientWidth,
        document.querySelector('.results').scrollWidth, document.querySelector('.results').clientWidth]""")
    assert widths[0] <= widths[1] and widths[2] <= widths[3], widths
    for column in ("finished", "run time", "daemon"):
        header = admin_page.locator("#result_list thead th", has_text=column.upper()).first
        box = header.bounding_box()
        assert box["x"] + box["width"] <= 1366, column
    expect(admin_page.locator(f"#result_list tr:has(a[href$='/{failed.pk}/change/'])")).to_contain_text("failed")
    # Every filter of the list is a dropdown, the daemons' too (one daemon here).
    expect(admin_page.locator("#changelist-filter h3", has_text="By daemon").locator(
        "xpath=following-sibling::ul[1]//select")).to_have_count(1)


def test_a_tasks_page_re_enqueues_and_cancels_with_its_buttons(admin_page, live_server, noop_type, daemon):
    task = TaskFactory(type=noop_type, status=Status.FAILED, daemon=daemon)
    admin_page.goto(f"{live_server.url}/admin/atp/instance/{task.pk}/change/")
    buttons = admin_page.locator("#atp-task-actions button")
    expect(buttons).to_have_count(7)
    admin_page.get_by_role("button", name="Re-enqueue").click()
    expect(admin_page.locator("#atp-action-count")).to_contain_text("Re-enqueue 1 selected task")
    admin_page.get_by_role("button", name="Yes, re-enqueue 1 task").click()
    admin_page.wait_for_url(f"{live_server.url}/admin/atp/instance/{task.pk}/change/")
    expect(admin_page.locator(".messagelist")).to_contain_text("re-enqueued")
    assert Instance.objects.get(pk=task.pk).status == Status.ACCEPTED
    admin_page.get_by_role("button", name="Cancel").click()
    admin_page.get_by_role("link", name="No, take me back").click()
    admin_page.wait_for_url(f"{live_server.url}/admin/atp/instance/{task.pk}/change/")
    assert Instance.objects.get(pk=task.pk).status == Status.ACCEPTED
    admin_page.get_by_role("button", name="Cancel").click()
    admin_page.get_by_role("button", name="Yes, cancel 1 task").click()
    expect(admin_page.locator(".messagelist")).to_contain_text("cancelled")
    assert Instance.objects.get(pk=task.pk).status == Status.CANCELLED
