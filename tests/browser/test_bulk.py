"""Bulk actions, run again and run now, and the task pages at a laptop's size, in Chromium."""

import pytest
from playwright.sync_api import expect

import atp
from atp import engine
from atp.models import Instance
from atp.states import Status
from tests.factories import TaskFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_bulk_retry_by_filter_says_how_many_then_does_it(logged_in, live_server, noop_type):
    failed = [TaskFactory(type=noop_type, status=Status.FAILED) for _ in range(3)]
    queued = TaskFactory(type=noop_type)
    page = logged_in
    page.goto(f"{live_server.url}/atp/tasks/")
    page.select_option("#atp-task-filter select[name=status]", "FAILED")
    with page.expect_navigation():
        page.get_by_role("button", name="Show").click()
    expect(page.locator("#atp-tasks tbody tr")).to_have_count(3)
    with page.expect_navigation():
        page.get_by_role("button", name="Re-enqueue…").click()
    expect(page.locator("#atp-bulk-count")).to_have_text("3")
    assert {t.status for t in Instance.objects.filter(pk__in=[t.pk for t in failed])} == {
        Status.FAILED}
    with page.expect_navigation():
        page.get_by_role("button", name="Re-enqueue 3 tasks").click()
    expect(page.locator(".atp-messages")).to_contain_text("3 re-enqueued")
    assert {t.status for t in Instance.objects.filter(pk__in=[t.pk for t in failed])} == {
        Status.ACCEPTED}
    assert Instance.objects.get(pk=queued.pk).status == Status.ACCEPTED


def test_a_bulk_cancel_of_nothing_has_nothing_to_confirm(logged_in, live_server, noop_type):
    TaskFactory(type=noop_type)
    page = logged_in
    page.goto(f"{live_server.url}/atp/tasks/?q=no-such-task")
    with page.expect_navigation():
        page.get_by_role("button", name="Cancel…").click()
    expect(page.locator("#atp-bulk-count")).to_contain_text("No task matches it")
    expect(page.get_by_role("button", name="Cancel 0 tasks")).to_have_count(0)
    assert Instance.objects.get().status == Status.ACCEPTED


def test_run_again_opens_a_new_task_and_run_now_starts_a_delayed_one(
        logged_in, live_server, noop_type):
    page = logged_in
    old = TaskFactory(type=noop_type, status=Status.FAILED, inputs={"n": 1})
    page.goto(f"{live_server.url}/atp/tasks/{old.pk}/")
    with page.expect_navigation():
        page.get_by_role("button", name="Run again").click()
    new = Instance.objects.exclude(pk=old.pk).get()
    assert page.url == f"{live_server.url}/atp/tasks/{new.pk}/"
    expect(page.locator(".atp-messages")).to_contain_text(
        f"Task #{old.pk} queued again as task #{new.pk}.")
    assert Instance.objects.get(pk=old.pk).status == Status.FAILED

    delayed = TaskFactory(type=noop_type, countdown=3600)
    page.goto(f"{live_server.url}/atp/tasks/{delayed.pk}/")
    expect(page.locator("#atp-task-eta")).to_contain_text("UTC")
    with page.expect_navigation():
        page.get_by_role("button", name="Run now").click()
    expect(page.locator(".atp-messages")).to_contain_text("made runnable now")
    expect(page.get_by_role("button", name="Run now")).to_be_disabled()
    claimed = engine.dequeue(engine.register_daemon(), limit=5)
    assert sorted(task.pk for task in claimed) == [new.pk, delayed.pk]


def test_cancel_and_delete_ask_first(logged_in, live_server, noop_type):
    page = logged_in
    task = TaskFactory(type=noop_type)
    page.goto(f"{live_server.url}/atp/tasks/{task.pk}/")
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator("#atp-task-state")).to_have_text("accepted")
    assert Instance.objects.get(pk=task.pk).status == Status.ACCEPTED
    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_navigation():
        page.get_by_role("button", name="Cancel").click()
    expect(page.locator("#atp-task-state")).to_have_text("cancelled")
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.get_by_role("button", name="Delete").click()
    assert Instance.objects.filter(pk=task.pk).exists()
    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_navigation():
        page.get_by_role("button", name="Delete").click()
    expect(page.locator(".atp-messages")).to_contain_text(f"Task #{task.pk} deleted.")
    assert not Instance.objects.filter(pk=task.pk).exists()


def test_buttons_grey_as_the_task_moves_on(logged_in, live_server, noop_type):
    page = logged_in
    task = TaskFactory(type=noop_type, status=Status.RUNNING)
    page.goto(f"{live_server.url}/atp/tasks/{task.pk}/")
    expect(page.get_by_role("button", name="Resume")).to_be_disabled()
    expect(page.get_by_role("button", name="Cancel")).to_be_enabled()
    page.evaluate("window.stillTheSamePage = true")
    engine.finish(task, attempt=task.attempt)
    expect(page.locator("#atp-task-state")).to_have_text("finished", timeout=15_000)
    expect(page.get_by_role("button", name="Cancel")).to_be_disabled()
    expect(page.get_by_role("button", name="Pause")).to_be_disabled()
    expect(page.get_by_role("button", name="Run again")).to_be_enabled()
    assert page.evaluate("window.stillTheSamePage") is True  # updated in place


def no_horizontal_scroll(page):
    return page.evaluate(
        "document.documentElement.scrollWidth <= document.documentElement.clientWidth")


def test_a_long_identifier_wraps_at_1366_pixels(logged_in, live_server, noop_type):
    page = logged_in
    page.set_viewport_size({"width": 1366, "height": 800})
    identifier = "x" * 305
    task = atp.enqueue("tests.noop", {"text": "y" * 3000}, identifier=identifier)
    TaskFactory(type=noop_type, status=Status.FAILED)
    page.goto(f"{live_server.url}/atp/tasks/")
    expect(page.locator("#atp-tasks")).to_contain_text(identifier)
    assert no_horizontal_scroll(page)
    page.goto(f"{live_server.url}/atp/tasks/{task.pk}/")
    expect(page.locator("h1")).to_contain_text(identifier)
    assert no_horizontal_scroll(page)
    box = page.locator(".atp-inputs").bounding_box()
    assert box["x"] + box["width"] <= 1366  # the long inputs stay in their box
    page.goto(f"{live_server.url}/admin/atp/instance/{task.pk}/change/")
    expect(page.locator(".field-identifier")).to_contain_text(identifier)
    assert no_horizontal_scroll(page)


def test_the_admin_retries_every_task_that_failed_the_same_way(logged_in, live_server, daemon):
    from atp.daemon.execution import run_task
    from tests.factories import claim_exactly

    atp.register_task_type("tests.fail", "tests.handlers.fail", max_restarts=0)
    failed = []
    for message in ("quota exceeded", "quota again", "disk full"):
        task = claim_exactly(atp.enqueue("tests.fail", {"message": message}), daemon)
        run_task(task.pk, task.attempt, task.type.handler)
        failed.append(task.pk)
    page = logged_in
    page.goto(f"{live_server.url}/admin/atp/instance/")
    with page.expect_navigation():
        page.get_by_label("a word of the failure text").fill("quota")
        page.get_by_label("a word of the failure text").press("Enter")
    expect(page.locator("#result_list tbody tr")).to_have_count(2)
    page.check("#action-toggle")
    page.select_option("select[name=action]", "reenqueue_tasks")
    with page.expect_navigation():
        page.click("button[name=index]")
    expect(page.locator("#atp-action-count")).to_contain_text("Re-enqueue 2 selected tasks")
    assert set(Instance.objects.values_list("status", flat=True)) == {Status.FAILED}
    with page.expect_navigation():
        page.get_by_role("button", name="Yes, re-enqueue 2 tasks").click()
    expect(page.locator(".messagelist")).to_contain_text("2 re-enqueued")
    assert [Instance.objects.get(pk=pk).status for pk in failed] == [
        Status.ACCEPTED, Status.ACCEPTED, Status.FAILED]
