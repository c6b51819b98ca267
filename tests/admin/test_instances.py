import re

import pytest
from django.contrib.messages import get_messages

import atp
from atp import engine
from atp.daemon.execution import run_task
from atp.models import Instance, LogRecord
from atp.states import Status
from tests.factories import TaskFactory, claim_exactly

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/atp/instance/"


@pytest.fixture
def admin(log_in):
    return log_in("superuser")


def rows(page):
    return [int(pk) for pk in re.findall(r'<th class="field-task_shown"><a href="/admin/atp/instance/(\d+)/change/', page)]


def last_message(response):
    return [str(m) for m in get_messages(response.wsgi_request)][-1]


def test_the_list_shows_the_columns_an_operator_needs(admin, noop_type):
    running = TaskFactory(type=noop_type, status=Status.RUNNING, identifier="job-" + "x" * 40)
    engine.set_progress(running, 1, 4, attempt=1)
    page = admin.get(CHANGELIST).content.decode()
    # The progress and a failure's last line sit under the state, the identifier under
    # the number: the list fits a 1366-pixel window (tests/browser/test_admin.py).
    for column in ("task", "type", "state", "attempt", "created", "finished", "run time",
                   "daemon"):
        assert f">{column.capitalize()}<" in page or f">{column}<" in page.lower(), column
    assert "atp-status-running" in page and 'value="0.250"' in page
    assert f'title="job-{"x" * 40}"' in page  # the full identifier, on hover
    # Dropdown filters for type, state and daemon; a date hierarchy.
    assert page.count("django_admin_listfilter_dropdown") or page.count("<select") >= 3
    assert 'class="toplinks"' in page  # the date hierarchy


def test_the_list_filters_by_state_and_searches_identifiers_and_numbers(admin, noop_type):
    failed = TaskFactory(type=noop_type, status=Status.FAILED, identifier="nightly-7")
    other = TaskFactory(type=noop_type)
    assert rows(admin.get(CHANGELIST, {"status__exact": "FAILED"}).content.decode()) == [failed.pk]
    assert rows(admin.get(CHANGELIST, {"q": "nightly-7"}).content.decode()) == [failed.pk]
    assert rows(admin.get(CHANGELIST, {"q": str(other.pk)}).content.decode()) == [other.pk]
    assert rows(admin.get(CHANGELIST, {"q": "nightly"}).content.decode()) == [failed.pk]
    assert rows(admin.get(CHANGELIST, {"q": "ightly"}).content.decode()) == []  # a prefix
    assert sorted(rows(admin.get(CHANGELIST, {"q": "tests.noop"}).content.decode())) == sorted(
        [failed.pk, other.pk])


def test_the_task_page_is_read_only_with_its_timeline(admin, daemon):
    atp.register_task_type("tests.fail", "tests.handlers.fail")
    task = claim_exactly(atp.enqueue("tests.fail", {"message": "broke"}), daemon)
    run_task(task.pk, task.attempt, task.type.handler, "host:1")
    page = admin.get(f"{CHANGELIST}{task.pk}/change/").content.decode()
    assert 'name="_save"' not in page  # nothing to save: changes go through actions
    timeline = page[page.index("State history"):]
    assert re.findall(r"atp-status-(\w+)", timeline) == ["accepted", "scheduled", "running", "failed"]
    assert "ValueError: broke" in timeline and "host:1" in timeline
    assert re.search(r"<td>\d+ ms</td>", timeline)  # time spent in a state
    assert f'href="/atp/tasks/{task.pk}/"' in page  # view on site: the live page


def test_the_task_page_previews_inputs_and_responses(admin, noop_type):
    task = TaskFactory(type=noop_type, status=Status.FINISHED, inputs={"city": "Wien"})
    atp.set_response(task, {"rows": [1, 2]})
    page = admin.get(f"{CHANGELIST}{task.pk}/change/").content.decode()
    assert "&quot;city&quot;: &quot;Wien&quot;" in page
    assert "&quot;rows&quot;: [" in page and f"/admin/atp/instance/{task.pk}/response/" in page
    atp.set_response(task, b"\x89PNG", "image/png")
    page = admin.get(f"{CHANGELIST}{task.pk}/change/").content.decode()
    assert f'<img src="/admin/atp/instance/{task.pk}/response/"' in page


def test_a_pickled_input_is_described_never_unpickled(pickle_enabled, admin, tmp_path):
    from tests.test_serialization import Tripwire

    atp.register_task_type("tests.pickled", "tests.handlers.echo", input_format="pickle")
    task = atp.enqueue("tests.pickled", Tripwire(tmp_path / "unpickled"))
    page = admin.get(f"{CHANGELIST}{task.pk}/change/").content.decode()
    assert re.search(r"pickled, [\d,]+ bytes", page)
    assert not (tmp_path / "unpickled").exists()


def test_actions_go_through_the_verbs_and_sum_up_refusals(admin, noop_type):
    tasks = [TaskFactory(type=noop_type, status=s) for s in
             (Status.FAILED, Status.CANCELLED, Status.RUNNING, Status.FINISHED, Status.FINISHED)]
    response = admin.post(CHANGELIST, {"confirmed": "yes", "action": "reenqueue_tasks",
                                       "_selected_action": [t.pk for t in tasks]})
    assert last_message(response) == "3 re-enqueued, 2 refused: already finished"
    assert [Instance.objects.get(pk=t.pk).status for t in tasks] == [
        Status.ACCEPTED, Status.ACCEPTED, Status.ACCEPTED, Status.FINISHED, Status.FINISHED]
    assert LogRecord.objects.filter(instance=tasks[0], message="re-enqueued after FAILED").exists()


def test_pause_resume_and_cancel_actions(admin, noop_type):
    running = TaskFactory(type=noop_type, status=Status.RUNNING)
    queued = TaskFactory(type=noop_type)
    selected = [running.pk, queued.pk]
    response = admin.post(CHANGELIST, {"confirmed": "yes", "action": "pause_tasks", "_selected_action": selected})
    assert last_message(response) == "1 paused, 1 refused: still queued"
    response = admin.post(CHANGELIST, {"confirmed": "yes", "action": "resume_tasks", "_selected_action": selected})
    assert last_message(response) == "1 resumed, 1 refused: still queued"
    response = admin.post(CHANGELIST, {"confirmed": "yes", "action": "cancel_tasks", "_selected_action": selected})
    assert last_message(response) == "2 cancelled"


def test_delete_ended_deletes_only_ended_tasks_across_a_large_selection(admin, noop_type, monkeypatch):
    from atp import bulk as actions

    monkeypatch.setattr(actions, "BATCH_SIZE", 7)
    ended = [TaskFactory(type=noop_type, status=Status.CANCELLED) for _ in range(20)]
    live = TaskFactory(type=noop_type)
    response = admin.post(CHANGELIST, {"confirmed": "yes", "action": "delete_ended_tasks", "select_across": "1",
                                       "index": "0", "_selected_action": [live.pk]})
    assert last_message(response) == "20 deleted, 1 refused: not ended, or its worker is still being stopped"
    assert list(Instance.objects.values_list("pk", flat=True)) == [live.pk]
    assert ended


def test_actions_declare_their_permissions(log_in, noop_type):
    viewer = log_in("view only")
    TaskFactory(type=noop_type)
    page = viewer.get(CHANGELIST).content.decode()
    assert "reenqueue_tasks" not in page and "delete_ended_tasks" not in page
    changer = log_in("can change")
    page = changer.get(CHANGELIST).content.decode()
    assert "reenqueue_tasks" in page and "delete_ended_tasks" not in page
    assert "delete_selected" not in page  # deleting live tasks would bypass the verbs


def test_whoever_may_view_a_task_sees_its_history(log_in, daemon):
    atp.register_task_type("tests.fail", "tests.handlers.fail")
    task = claim_exactly(atp.enqueue("tests.fail", {"message": "broke"}), daemon)
    run_task(task.pk, task.attempt, task.type.handler, "host:1")
    viewer = log_in("view only")  # no permission on the history table itself
    page = viewer.get(f"{CHANGELIST}{task.pk}/change/").content.decode()
    timeline = page[page.index("State history"):]
    assert re.findall(r"atp-status-(\w+)", timeline) == ["accepted", "scheduled", "running", "failed"]


def test_a_long_history_shows_the_time_spent_in_its_latest_states(admin, noop_type, monkeypatch):
    from atp.admin import instances

    monkeypatch.setattr(instances, "HISTORY_SHOWN", 4)
    task = TaskFactory(type=noop_type, status=Status.RUNNING)
    for _ in range(6):
        engine.pause(task)
        engine.resume(task)
    page = admin.get(f"{CHANGELIST}{task.pk}/change/").content.decode()
    timeline = page[page.index("State history"):]
    states = re.findall(r"atp-status-(\w+)", timeline)
    assert states == ["paused", "running", "paused", "running"]
    # Every state shown has its time: none was left blank for being outside a window.
    assert len(re.findall(r"<td>[\d.]+ (?:ms|s)</td>", timeline)) == 4


def test_a_response_labelled_json_that_is_not_is_shown_as_it_is(admin, noop_type):
    task = TaskFactory(type=noop_type, status=Status.FINISHED)
    atp.set_response(task, "not {json", "application/json")
    page = admin.get(f"{CHANGELIST}{task.pk}/change/").content.decode()
    assert "not {json" in page and f"/admin/atp/instance/{task.pk}/response/" in page


def test_an_action_reports_a_task_that_failed_and_carries_on(admin, noop_type, monkeypatch):
    from atp.admin import instances

    tasks = [TaskFactory(type=noop_type, status=Status.RUNNING) for _ in range(3)]
    real_cancel = engine.cancel

    def cancel(pk, by=None):
        if pk == tasks[1].pk:
            raise RuntimeError("the database went away")
        return real_cancel(pk, by=by)

    monkeypatch.setattr(instances.engine, "cancel", cancel)
    response = admin.post(CHANGELIST, {"confirmed": "yes", "action": "cancel_tasks",
                                       "_selected_action": [t.pk for t in tasks]})
    assert last_message(response) == "2 cancelled, 1 failed (see the server log)"
    assert [Instance.objects.get(pk=t.pk).status for t in tasks] == [
        Status.CANCELLED, Status.RUNNING, Status.CANCELLED]


def test_lists_sort_only_by_indexed_columns_and_count_no_facets(admin, noop_type):
    TaskFactory(type=noop_type)
    page = admin.get(CHANGELIST).content.decode()
    assert "?o=" in page  # sortable by number and creation time
    sortable = set(re.findall(r'<th scope="col" class="sortable[^"]*column-(\w+)', page))
    assert sortable == {"task_shown", "created_at"}  # by id, by created
    assert "_facets" not in page  # Django 5's per-filter counts read the whole table


def test_the_task_page_reads_the_history_once_however_long_it_is(admin, noop_type):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def queries_for(task):
        with CaptureQueriesContext(connection) as queries:
            assert admin.get(f"{CHANGELIST}{task.pk}/change/").status_code == 200
        return len(queries)

    short, long = (TaskFactory(type=noop_type, status=Status.RUNNING) for _ in range(2))
    for _ in range(20):
        engine.log(long, "still going")
    queries_for(short)  # warm up the caches (content types)
    assert queries_for(long) == queries_for(short)


def test_an_action_says_how_many_tasks_it_touches_before_it_does_anything(admin, noop_type):
    failed = [TaskFactory(type=noop_type, status=Status.FAILED) for _ in range(3)]
    form = {"action": "reenqueue_tasks", "select_across": "1", "index": "0",
            "_selected_action": [failed[0].pk]}
    page = admin.post(f"{CHANGELIST}?status__exact=FAILED", form).content.decode()
    assert re.search(r'id="atp-action-count">Re-enqueue <strong>3</strong> selected tasks', page)
    assert {t.status for t in Instance.objects.all()} == {Status.FAILED}
    form = {key: value for key, value in form.items() if key != "index"}
    response = admin.post(f"{CHANGELIST}?status__exact=FAILED", {**form, "confirmed": "yes"})
    assert last_message(response) == "3 re-enqueued"
    assert {t.status for t in Instance.objects.all()} == {Status.ACCEPTED}


def test_run_again_and_run_now_actions(admin, noop_type):
    ended = TaskFactory(type=noop_type, status=Status.FINISHED, inputs={"n": 1})
    delayed = TaskFactory(type=noop_type, countdown=3600)
    selected = [ended.pk, delayed.pk]
    response = admin.post(CHANGELIST, {"confirmed": "yes", "action": "run_again_tasks",
                                       "_selected_action": selected})
    assert last_message(response) == "1 queued again, 1 refused: still queued"
    assert Instance.objects.get(pk=ended.pk).status == Status.FINISHED
    assert Instance.objects.count() == 3
    response = admin.post(CHANGELIST, {"confirmed": "yes", "action": "run_now_tasks",
                                       "_selected_action": selected})
    assert last_message(response) == "1 made runnable now, 1 refused: already finished"
    response = admin.post(CHANGELIST, {"confirmed": "yes", "action": "run_now_tasks",
                                       "_selected_action": [delayed.pk]})
    assert last_message(response) == "0 made runnable now, 1 refused: not delayed"


def test_the_task_page_shows_times_with_seconds_and_zone(admin, noop_type):
    task = TaskFactory(type=noop_type, status=Status.FINISHED)
    page = admin.get(f"{CHANGELIST}{task.pk}/change/").content.decode()
    assert len(re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC", page)) >= 4


def test_the_list_filters_by_a_word_of_the_failure_and_an_action_takes_them_all(admin, daemon):
    from atp.daemon.execution import run_task

    atp.register_task_type("tests.fail", "tests.handlers.fail", max_restarts=0)
    failed = []
    for message in ("quota exceeded", "Quota again", "disk full"):
        task = claim_exactly(atp.enqueue("tests.fail", {"message": message}), daemon)
        run_task(task.pk, task.attempt, task.type.handler)
        failed.append(task.pk)
    url = f"{CHANGELIST}?failure=quota&status__exact=FAILED"
    page = admin.get(url).content.decode()
    assert sorted(rows(page)) == failed[:2]
    assert 'name="status__exact" value="FAILED"' in page  # kept by the box's form
    assert '<span class="atp-error-excerpt">ValueError: quota exceeded</span>' in page
    response = admin.post(url, {"confirmed": "yes", "action": "reenqueue_tasks",
                                "select_across": "1", "_selected_action": [failed[0]]})
    assert last_message(response) == "2 re-enqueued"
    assert Instance.objects.get(pk=failed[2]).status == Status.FAILED
    assert rows(admin.get(f"{CHANGELIST}?failure=nothing-like-it").content.decode()) == []


def test_the_task_page_acts_through_the_lists_actions_asking_first(admin, noop_type):
    task = atp.enqueue("tests.noop")
    page = admin.get(f"{CHANGELIST}{task.pk}/change/").content.decode()
    assert re.findall(r'name="action" value="(\w+)"', page) == [
        "reenqueue_tasks", "run_again_tasks", "run_now_tasks", "pause_tasks", "resume_tasks",
        "cancel_tasks", "delete_ended_tasks"]
    act = f"{CHANGELIST}{task.pk}/act/"
    asked = admin.post(act, {"action": "cancel_tasks", "_selected_action": task.pk})
    assert 'id="atp-action-count"' in asked.content.decode()
    assert f'href="{CHANGELIST}{task.pk}/change/"' in asked.content.decode()  # "no" goes back
    assert Instance.objects.get(pk=task.pk).status == Status.ACCEPTED
    done = admin.post(act, {"action": "cancel_tasks", "_selected_action": task.pk, "confirmed": "yes"})
    assert done.status_code == 302 and done.url == f"{CHANGELIST}{task.pk}/change/"
    assert Instance.objects.get(pk=task.pk).status == Status.CANCELLED
    assert "cancelled" in last_message(done)


def enabled_buttons(page):
    """Return the actions of a task page's buttons that are not greyed."""
    return [name for name, rest in re.findall(
        r'name="action" value="(\w+)">.*?<button([^>]*)>', page, re.S) if "disabled" not in rest]


def test_the_task_pages_buttons_are_greyed_where_its_state_does_not_allow_them(admin, noop_type):
    waiting = atp.enqueue("tests.noop")
    delayed = atp.enqueue("tests.noop", countdown=3600)
    failed = TaskFactory(type=noop_type, status=Status.FAILED)
    running = TaskFactory(type=noop_type, status=Status.RUNNING)

    def enabled(task):
        return enabled_buttons(admin.get(f"{CHANGELIST}{task.pk}/change/").content.decode())

    assert enabled(waiting) == ["cancel_tasks"]
    assert enabled(delayed) == ["run_now_tasks", "cancel_tasks"]
    assert enabled(failed) == ["reenqueue_tasks", "run_again_tasks", "delete_ended_tasks"]
    assert enabled(running) == ["reenqueue_tasks", "pause_tasks", "cancel_tasks"]
    page = admin.get(f"{CHANGELIST}{failed.pk}/change/").content.decode()
    assert 'disabled title="not for a task that is failed"' in page


def test_the_task_pages_actions_refuse_what_is_not_one_or_not_theirs(admin, log_in, client, noop_type):
    task = atp.enqueue("tests.noop")
    act = f"{CHANGELIST}{task.pk}/act/"
    assert admin.get(act).status_code == 405
    assert admin.post(act, {"action": "delete_selected"}).status_code == 400
    viewer = log_in("view only", client.__class__())
    assert viewer.post(act, {"action": "cancel_tasks", "confirmed": "yes"}).status_code == 400
    assert "atp-task-actions" not in viewer.get(f"{CHANGELIST}{task.pk}/change/").content.decode()
    assert Instance.objects.get(pk=task.pk).status == Status.ACCEPTED


def test_the_daemon_filter_is_a_dropdown_however_few_daemons(admin, daemon, noop_type):
    TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)
    page = admin.get(CHANGELIST).content.decode()
    assert re.search(r"By daemon.*?<select", page, re.S)
