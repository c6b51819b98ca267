"""Django's Tasks framework in front of atp, run by real daemons: the same scenarios on
the ``django_tasks`` backport (Django 4.2 and 5.2) and on Django 6's ``django.tasks``."""

import datetime
import json
import os
import signal

import pytest
from django.utils import timezone

import atp
from atp.djangotasks.compat import BUILT_IN, TaskResultStatus
from atp.models import Instance, LogRecord
from atp.states import Status
from tests.djangotasks import functions
from tests.processes import start_module, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def signal_log(tmp_path, monkeypatch):
    path = tmp_path / "signals.log"
    monkeypatch.setenv("ATP_TEST_SIGNAL_LOG", str(path))
    return path


@pytest.fixture
def daemon(start_daemon, signal_log):
    return start_daemon("--workers", "2")


def finished(result, timeout=30, daemon=None):
    def done():
        result.refresh()
        return result.is_finished
    wait_until(done, timeout, message=f"task result {result.id} finished",
               output=None if daemon is None else daemon.output)
    return result


def test_the_framework_is_the_one_this_django_has():
    import django

    assert BUILT_IN == (django.VERSION >= (6, 0))


def test_a_task_runs_and_its_result_is_read_from_any_process(daemon, signal_log):
    result = functions.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY and result.enqueued_at is not None
    finished(result, daemon=daemon)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    again = functions.add.get_result(result.id)
    assert (again.return_value, again.args, again.kwargs) == (5, [2, 3], {})
    assert again.enqueued_at <= again.started_at <= again.last_attempted_at <= again.finished_at
    assert len(again.worker_ids) == 1 and again.errors == []
    # The signals, in order: enqueued here, started and finished in the worker.
    assert signal_log.read_text().splitlines() == [
        f"enqueued {result.id} READY", f"started {result.id} RUNNING",
        f"finished {result.id} SUCCESSFUL"]


def test_json_arguments_and_return_values_round_trip(daemon):
    result = functions.echo.enqueue(1, "two", [3.5, None], flag=True, nested={"a": [1]})
    finished(result, daemon=daemon)
    assert result.return_value == {"args": [1, "two", [3.5, None]],
                                   "kwargs": {"flag": True, "nested": {"a": [1]}}}


def test_a_deferred_task_does_not_start_before_its_time(daemon):
    run_after = timezone.now() + datetime.timedelta(seconds=1.5)
    result = functions.add.using(run_after=run_after).enqueue(1, 1)
    finished(result, daemon=daemon)
    assert result.started_at >= run_after
    assert result.task.run_after == run_after


def test_tasks_run_by_priority_then_in_enqueue_order(start_daemon, tmp_path):
    order = tmp_path / "order"
    low = functions.mark.using(priority=-5).enqueue(str(order), "low")
    first = functions.mark.enqueue(str(order), "first")
    high = functions.mark.using(priority=50).enqueue(str(order), "high")
    second = functions.mark.enqueue(str(order), "second")
    daemon = start_daemon("--workers", "1", "--prefetch", "0")
    for result in (low, first, high, second):
        finished(result, daemon=daemon)
    assert order.read_text().split() == ["high", "first", "second", "low"]
    assert high.task.priority == 50


def test_get_result_while_running_and_after(daemon, tmp_path):
    go = tmp_path / "go"
    result = functions.wait_for.enqueue(str(go))

    def running():
        result.refresh()
        return result.status == TaskResultStatus.RUNNING
    wait_until(running, 30, message="the task running", output=daemon.output)
    assert result.started_at is not None and result.finished_at is None
    with pytest.raises(ValueError, match="not finished"):
        result.return_value  # noqa: B018
    go.touch()
    finished(result, daemon=daemon)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.finished_at >= result.started_at


def test_a_failure_keeps_its_traceback_and_a_retry_runs_it_again(daemon, tmp_path, signal_log):
    fixed = tmp_path / "fixed"
    result = functions.fail_unless.enqueue(str(fixed))
    finished(result, daemon=daemon)
    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class_path == "builtins.ValueError"
    assert error.exception_class is ValueError
    assert "fail_unless" in error.traceback and "is missing" in error.traceback
    with pytest.raises(ValueError, match="failed"):
        result.return_value  # noqa: B018
    # A retry: the task again, on a new attempt.
    fixed.touch()
    atp.reenqueue(int(result.id))
    wait_until(lambda: (result.refresh(), result.status)[1] == TaskResultStatus.SUCCESSFUL, 30,
               message="the retry succeeded", output=daemon.output)
    assert result.return_value == "fine"
    assert len(result.worker_ids) == 2 and len(result.errors) == 1
    assert [line.split()[0] for line in signal_log.read_text().splitlines()] == [
        "enqueued", "started", "finished", "started", "finished"]


def test_an_async_task_function_runs(daemon):
    result = functions.add_later.enqueue(20, 22)
    finished(result, daemon=daemon)
    assert result.return_value == 42


def test_a_function_taking_the_context_gets_its_attempt(daemon):
    result = functions.which_attempt.enqueue("x")
    finished(result, daemon=daemon)
    assert result.return_value == {"attempt": 1, "id": result.id, "label": "x"}


def test_a_task_whose_worker_is_killed_finishes_on_its_restart(daemon, tmp_path):
    pid_file = tmp_path / "pid"
    result = functions.hang_on_first_attempt.enqueue(str(pid_file))
    wait_until(pid_file.exists, 30, message="the first attempt running", output=daemon.output)
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    finished(result, timeout=60, daemon=daemon)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 2
    assert len(result.worker_ids) == 2
    assert result.errors == []  # a restart is not an exception of the function


def test_a_daemon_serves_only_the_queues_it_is_given(start_daemon, tmp_path):
    order = tmp_path / "order"
    elsewhere = functions.mark.enqueue(str(order), "default queue")
    mine = functions.mark.using(queue_name="other").enqueue(str(order), "other queue")
    daemon = start_daemon("--workers", "1", "--queues", "other")
    finished(mine, daemon=daemon)
    elsewhere.refresh()
    assert elsewhere.status == TaskResultStatus.READY
    assert order.read_text().split("\n")[0] == "other queue"


def test_an_unknown_queue_stops_the_daemon_saying_so(start_daemon):
    daemon = start_daemon("--queues", "nowhere")
    assert daemon.process.wait(timeout=60) != 0
    assert "no Django Tasks queue 'nowhere'" in daemon.output()


def test_a_time_out_with_no_restart_left_is_a_timeout_error(daemon, tmp_path):
    # The "brief" queue: a 3 s time-out and no restart (tests/settings.py).
    result = functions.wait_for.using(queue_name="brief").enqueue(str(tmp_path / "never"))
    finished(result, timeout=60, daemon=daemon)
    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class is TimeoutError
    assert "time-out" in error.traceback


def test_a_queues_retry_policy_retries_a_failing_function(daemon, tmp_path):
    # A retry policy for the queue "other" (OPTIONS would set it; here the type is tuned
    # directly, after the daemon wrote the settings' parameters at its start).
    fixed = tmp_path / "fixed"
    atp.register_task_type("django.tasks/default/other", "atp.djangotasks.runner.run",
                           retry_limit=2, min_backoff=3)  # time to mend it before the retry
    result = functions.fail_unless.using(queue_name="other").enqueue(str(fixed))

    def failed_once():
        result.refresh()
        return len(result.errors) == 1
    wait_until(failed_once, 30, message="a first failure", output=daemon.output)
    fixed.touch()
    finished(result, daemon=daemon)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert [error.exception_class for error in result.errors] == [ValueError]
    assert len(result.worker_ids) >= 2


@pytest.mark.parametrize("kind", [SystemExit, KeyboardInterrupt])
def test_a_function_raising_systemexit_or_keyboardinterrupt_fails_once_per_attempt(
        start_daemon, kind):
    daemon = start_daemon("--workers", "1")
    before = finished(functions.worker_pid.enqueue(), daemon=daemon)
    # Retried once by the queue's policy, as any failure of the function; the worker lives.
    # (Tuned once the daemon wrote the settings' parameters at its start.)
    atp.register_task_type("django.tasks/default/other", "atp.djangotasks.runner.run",
                           retry_limit=1, min_backoff=0.1)
    result = finished(functions.raise_base.using(queue_name="other").enqueue(kind.__name__),
                      daemon=daemon)
    after = finished(functions.worker_pid.enqueue(), daemon=daemon)
    assert result.status == TaskResultStatus.FAILED
    assert [error.exception_class for error in result.errors] == [kind, kind]
    assert result.errors[0].exception_class_path == f"builtins.{kind.__name__}"
    assert len(result.worker_ids) == 2
    assert before.return_value == after.return_value, "the worker was replaced"


def test_a_task_function_outside_installed_apps_that_the_project_imports_runs(daemon):
    # The daemon's own start-up (django.setup()) imports tests.outside.tasks, through the
    # installed app tests.importing_app, as Wagtail's imports modelsearch.tasks.
    from tests.outside import tasks as outside_tasks

    result = finished(outside_tasks.add.enqueue(20, 22), daemon=daemon)
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 42


FORGED = {
    "tests.outside.never_imported.boom": "tests.outside.never_imported is not in an installed app",
    "os.system": "os is not in an installed app",
    "tests.outside.tasks.plain": "tests.outside.tasks is not in an installed app",
    "tests.handlers.noop": "'tests.handlers.noop' is not a task function",
}


def test_a_row_naming_anything_else_runs_nothing_and_imports_nothing(start_daemon, tmp_path,
                                                                     monkeypatch):
    mark = tmp_path / "imported"
    monkeypatch.setenv("ATP_TEST_IMPORT_MARK", str(mark))  # for every process started
    daemon = start_daemon("--workers", "1")
    finished(functions.add.enqueue(1, 1), daemon=daemon)
    # A retry policy would not help: a refusal is final. (Tuned once the daemon wrote the
    # settings' parameters at its start.)
    atp.register_task_type("django.tasks/default/default", "atp.djangotasks.runner.run",
                           retry_limit=2, min_backoff=0.1)
    forged = {path: atp.enqueue("django.tasks/default/default", {
        "task": path, "args": [f"touch {mark}"], "kwargs": {}, "run_after": None})
        for path in FORGED}
    for path, instance in forged.items():
        wait_until(lambda pk=instance.pk: Instance.objects.get(pk=pk).is_terminal, 30,
                   message=f"the row naming {path} ended", output=daemon.output)
        ended = Instance.objects.get(pk=instance.pk)
        assert (ended.status, ended.attempt, ended.restarts) == (Status.FAILED, 1, 0), path
        assert FORGED[path] in LogRecord.objects.filter(instance=instance).last().message
    # get_result in a process of its own refuses it before importing anything.
    probe = start_module("tests.djangotasks.probe", forged["tests.outside.never_imported.boom"].pk)
    output, errors = probe.communicate(timeout=60)
    assert probe.returncode == 0, errors
    probed = json.loads(output)
    assert (probed["refused"], probed["imported"]) == (True, False), probed
    assert FORGED["tests.outside.never_imported.boom"] in probed["reason"]
    assert not mark.exists(), "a process imported tests.outside.never_imported"
