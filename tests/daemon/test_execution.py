import pytest
from django.test import override_settings

import atp
import tests.handlers
from atp import engine
from atp.daemon.execution import describe_failure, run_task
from atp.models import Instance, LogRecord, Response, Type
from atp.states import Status

pytestmark = pytest.mark.django_db


def ran(instance):
    """Return the task as it ended, and its last history entry."""
    instance = Instance.objects.get(pk=instance.pk)
    return instance, LogRecord.objects.filter(instance=instance).last()


def test_a_returned_value_becomes_the_response_with_the_finish(db, claimed):
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    task = claimed(atp.enqueue("tests.echo", {"pages": 3}))
    run_task(task.pk, task.attempt, task.type.handler, "host:1")
    instance, last = ran(task)
    assert (instance.status, last.status, last.daemon) == (Status.FINISHED, Status.FINISHED, "host:1")
    assert atp.get_response(instance).json() == {"pages": 3}


def test_the_context_logs_reports_progress_and_sets_a_response(db, claimed):
    atp.register_task_type("tests.ctx", "tests.handlers.log_and_respond")
    task = claimed(atp.enqueue("tests.ctx", {}, identifier="job-9"))
    run_task(task.pk, task.attempt, task.type.handler)
    instance, _ = ran(task)
    assert instance.status == Status.FINISHED
    assert (instance.progress_done, instance.progress_total, instance.progress_message) == (1, 2, "halfway")
    assert LogRecord.objects.filter(instance=task, status=None, message="working on job-9").exists()
    response = Response.objects.get(instance=task)
    assert (bytes(response.data), response.content_type) == (b"\x00partial", "application/octet-stream")


def test_a_returned_value_replaces_a_response_set_earlier(db, claimed):
    atp.register_task_type("tests.ctx", "tests.handlers.log_and_respond")
    task = claimed(atp.enqueue("tests.ctx", {"return": "final"}))
    run_task(task.pk, task.attempt, task.type.handler)
    assert atp.get_response(task).text == "final"


def test_an_exception_fails_the_task_with_its_traceback(db, claimed):
    atp.register_task_type("tests.fail", "tests.handlers.fail")
    task = claimed(atp.enqueue("tests.fail", {"message": "<b>bad input</b>"}))
    run_task(task.pk, task.attempt, task.type.handler)
    instance, last = ran(task)
    assert instance.status == Status.FAILED and instance.finished is not None
    assert last.message.startswith("Traceback (most recent call last):")
    assert 'tests/handlers.py", line' in last.message
    assert last.message.rstrip().endswith("ValueError: <b>bad input</b>")


def test_a_long_traceback_keeps_its_end():
    with override_settings(ATP_TRACEBACK_MAX_CHARS=200):
        try:
            raise ValueError("x" * 1000 + " the end")
        except ValueError:
            text = describe_failure()
    assert text.startswith("[first ") and text.endswith(" the end\n")
    assert len(text) < 260


def test_a_type_naming_a_function_outside_the_allowed_modules_runs_nothing(db, claimed, tmp_path):
    atp.register_task_type("tests.evil", "tests.handlers.noop")
    # Someone with database access points the type at a function of their choice.
    Type.objects.filter(identifier="tests.evil").update(handler="os.system")
    task = claimed(atp.enqueue("tests.evil", f"touch {tmp_path}/pwned"))
    run_task(task.pk, task.attempt, task.type.handler, "host:1")
    instance, last = ran(task)
    assert (instance.status, instance.restarts) == (Status.ACCEPTED, 0)
    assert last.message == ("not run by daemon host:1: handler 'os.system' is not in an "
                            "installed app or in ATP_HANDLER_MODULES; it is not run")
    assert not (tmp_path / "pwned").exists()
    assert not LogRecord.objects.filter(instance=task, status=Status.RUNNING).exists()


def test_tampered_pickled_inputs_are_never_unpickled(pickle_enabled, db, claimed):
    from atp.models import Inputs

    atp.register_task_type("tests.pickled", "tests.handlers.echo", input_format="pickle")
    task = claimed(atp.enqueue("tests.pickled", {"a": 1}))
    data = Inputs.objects.get(pk=task.pk).data
    Inputs.objects.filter(pk=task.pk).update(data=data[:-2] + "xx")
    run_task(task.pk, task.attempt, task.type.handler)
    _, last = ran(task)
    assert last.status == Status.FAILED
    assert "failed their signature check" in last.message


def test_a_response_that_cannot_be_stored_fails_the_task(db, claimed):
    atp.register_task_type("tests.unstorable", "tests.handlers.return_unstorable")
    task = claimed(atp.enqueue("tests.unstorable"))
    run_task(task.pk, task.attempt, task.type.handler)
    instance, last = ran(task)
    assert instance.status == Status.FAILED
    assert "a object cannot be stored as a response" in last.message
    assert not Response.objects.filter(instance=task).exists()


def test_an_attempt_superseded_before_it_starts_runs_nothing(db, claimed, daemon):
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    task = claimed(atp.enqueue("tests.echo"))
    engine.restart(task, "daemon lost", attempt=task.attempt)
    run_task(task.pk, task.attempt, task.type.handler)
    instance, last = ran(task)
    assert (instance.status, last.status) == (Status.ACCEPTED, Status.ACCEPTED)


@override_settings(ATP_PROGRESS_INTERVAL_SECONDS=0)
def test_a_handler_learns_that_its_task_was_cancelled(db, claimed):
    from atp.daemon.context import TaskContext
    from atp.exceptions import InvalidTransition

    atp.register_task_type("tests.echo", "tests.handlers.echo")
    task = claimed(atp.enqueue("tests.echo"))
    engine.start(task, attempt=task.attempt)
    context = TaskContext(task, task.attempt)
    context.set_progress(1, 10)
    atp.cancel(task)
    with pytest.raises(InvalidTransition):
        context.set_progress(2, 10)


@override_settings(ATP_PROGRESS_INTERVAL_SECONDS=60)
def test_progress_is_written_at_most_once_an_interval_and_the_latest_at_the_end(db, claimed):
    from atp.daemon.context import TaskContext

    atp.register_task_type("tests.echo", "tests.handlers.echo")
    task = claimed(atp.enqueue("tests.echo"))
    engine.start(task, attempt=task.attempt)
    context = TaskContext(task, task.attempt)
    for done in range(1, 101):
        context.set_progress(done, 100, f"row {done}")
    assert Instance.objects.get(pk=task.pk).progress_done == 1
    context.flush()
    stored = Instance.objects.get(pk=task.pk)
    assert (stored.progress_done, stored.progress_message) == (100, "row 100")


def test_an_exception_whose_message_no_database_stores_fails_the_task_once(db, claimed):
    atp.register_task_type("tests.nul", "tests.handlers.fail_with_nul")
    task = claimed(atp.enqueue("tests.nul"))
    run_task(task.pk, task.attempt, task.type.handler)
    instance, last = ran(task)
    assert (instance.status, instance.restarts) == (Status.FAILED, 0)
    assert last.message.rstrip().endswith(r"ValueError: a NUL\x00byte in the message")


@pytest.mark.parametrize("inputs", [{}, {"json": True}], ids=["text", "json"])
def test_a_returned_lone_surrogate_fails_the_task_once(db, claimed, inputs):
    atp.register_task_type("tests.surrogate", "tests.handlers.return_lone_surrogate")
    task = claimed(atp.enqueue("tests.surrogate", inputs))
    run_task(task.pk, task.attempt, task.type.handler)
    instance, last = ran(task)
    assert (instance.status, instance.restarts) == (Status.FAILED, 0)
    assert "cannot be stored as a response: it is not valid text" in last.message
    assert not Response.objects.filter(instance=task).exists()


class Ephemeral:
    """A class that exists when a task is enqueued, and no more when it runs."""


def test_pickled_inputs_naming_a_class_that_is_gone_fail_the_task_once(pickle_enabled, db, claimed, monkeypatch):
    import tests.handlers

    atp.register_task_type("tests.pickled", "tests.handlers.echo", input_format="pickle")
    Ephemeral.__module__, Ephemeral.__qualname__ = "tests.handlers", "Ephemeral"
    monkeypatch.setattr(tests.handlers, "Ephemeral", Ephemeral, raising=False)
    task = claimed(atp.enqueue("tests.pickled", {"obj": Ephemeral()}))
    monkeypatch.delattr(tests.handlers, "Ephemeral")
    run_task(task.pk, task.attempt, task.type.handler)
    instance, last = ran(task)
    assert (instance.status, instance.restarts) == (Status.FAILED, 0)
    assert last.message.startswith("not run: its inputs cannot be loaded (AttributeError:")
    assert not LogRecord.objects.filter(instance=task, status=Status.RUNNING).exclude(
        attempt=task.attempt).exists()


@override_settings(ATP_MAX_RESPONSE_BYTES=1000)
def test_a_response_beyond_the_size_limit_fails_the_task_once(db, claimed):
    atp.register_task_type("tests.big", "tests.handlers.return_bytes")
    atp.register_task_type("tests.bigger", "tests.handlers.return_bytes", max_response_bytes=5000)
    task = claimed(atp.enqueue("tests.big", {"bytes": 1001}))
    run_task(task.pk, task.attempt, task.type.handler)
    instance, last = ran(task)
    assert (instance.status, instance.restarts) == (Status.FAILED, 0)
    assert "the response is 1,001 bytes, more than the 1,000 bytes" in last.message
    assert not Response.objects.filter(instance=task).exists()
    allowed = claimed(atp.enqueue("tests.bigger", {"bytes": 4000}))
    run_task(allowed.pk, allowed.attempt, allowed.type.handler)
    assert atp.get_response(allowed).size == 4000


@override_settings(ATP_MAX_RESPONSE_BYTES=1000)
def test_a_response_set_beyond_the_size_limit_is_refused(db, claimed):
    from atp.exceptions import ResponseTooLarge

    atp.register_task_type("tests.big", "tests.handlers.set_big_response")
    task = claimed(atp.enqueue("tests.big", {"bytes": 2000}))
    with pytest.raises(ResponseTooLarge, match="more than the 1,000 bytes"):
        atp.set_response(task, b"x" * 2000)
    run_task(task.pk, task.attempt, task.type.handler)
    instance, last = ran(task)
    assert instance.status == Status.FAILED and "ResponseTooLarge" in last.message
    assert not Response.objects.filter(instance=task).exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_errors_outside_the_handler_fail_once_and_the_worker_lives_on(start_daemon, tmp_path):
    from tests.processes import wait_until

    atp.register_task_type("tests.nul", "tests.handlers.fail_with_nul")
    atp.register_task_type("tests.surrogate", "tests.handlers.return_lone_surrogate")
    atp.register_task_type("tests.pid", "tests.handlers.report_pid")
    poison = [atp.enqueue("tests.nul"), atp.enqueue("tests.surrogate", {})]
    before = atp.enqueue("tests.pid", priority=1)
    after = atp.enqueue("tests.pid", priority=-1)
    daemon = start_daemon("--workers", 1)
    wait_until(lambda: Instance.objects.get(pk=after.pk).status == Status.FINISHED, timeout=60,
               message="all ran", output=daemon.output)
    for task in poison:
        instance = Instance.objects.get(pk=task.pk)
        assert (instance.status, instance.attempt, instance.restarts) == (Status.FAILED, 1, 0)
    assert "not valid text" in LogRecord.objects.filter(instance=poison[1]).last().message
    assert atp.get_response(before).json() == atp.get_response(after).json(), \
        "the worker was replaced"
    assert "died" not in daemon.output()


def test_a_failure_of_a_type_with_a_retry_policy_goes_back_to_the_queue(db, claimed):
    atp.register_task_type("tests.fail", "tests.handlers.fail", retry_limit=1, min_backoff=5)
    task = claimed(atp.enqueue("tests.fail"))
    run_task(task.pk, task.attempt, task.type.handler)
    instance, last = ran(task)
    assert (instance.status, instance.retries) == (Status.ACCEPTED, 1)
    assert last.message.startswith("Traceback (most recent call last):")
    assert "retry 1 (retry_limit 1) due at" in last.message and "in 5 s" in last.message


def test_a_handler_asks_for_a_retry_with_its_countdown(db, claimed):
    atp.register_task_type("tests.later", "tests.handlers.ask_for_retry", retry_limit=3)
    task = claimed(atp.enqueue("tests.later", {"countdown": 7}))
    run_task(task.pk, task.attempt, task.type.handler)
    instance, last = ran(task)
    assert (instance.status, instance.retries) == (Status.ACCEPTED, 1)
    assert "atp.exceptions.Retry: not yet" in last.message and "in 7 s" in last.message


def test_a_permanent_failure_is_not_retried(db, claimed):
    atp.register_task_type("tests.never", "tests.handlers.fail_for_good", retry_limit=3)
    task = claimed(atp.enqueue("tests.never"))
    run_task(task.pk, task.attempt, task.type.handler)
    instance, last = ran(task)
    assert (instance.status, instance.retries) == (Status.FAILED, 0)
    assert "PermanentFailure: the input can never work" in last.message


@pytest.mark.parametrize("kind, last_line", [
    ("SystemExit", "SystemExit: 3"), ("KeyboardInterrupt", "KeyboardInterrupt"),
    ("GeneratorExit", "GeneratorExit")])
def test_a_base_exception_the_handler_raises_is_one_failed_attempt(db, claimed, kind, last_line):
    atp.register_task_type("tests.base", "tests.handlers.raise_base_exception", retry_limit=1,
                           min_backoff=5)
    task = claimed(atp.enqueue("tests.base", {"kind": kind}))
    try:
        run_task(task.pk, task.attempt, task.type.handler)
    except BaseException as exc:  # noqa: BLE001 (what would end the worker)
        pytest.fail(f"{exc!r} left the attempt: it would end its worker")
    instance, last = ran(task)
    # Through the type's retry policy, like any failure: back to the queue, no restart.
    assert (instance.status, instance.retries, instance.restarts) == (Status.ACCEPTED, 1, 0)
    assert last.message.startswith("Traceback (most recent call last):")
    assert f"\n{last_line}\n" in last.message and "retry 1 (retry_limit 1)" in last.message


def test_a_worker_resolves_a_handler_once_and_never_keeps_one_it_refused(db, claimed, daemon,
                                                                          monkeypatch):
    from atp.daemon import execution

    atp.register_task_type("tests.echo", "tests.handlers.echo")
    resolved = {}

    def run(inputs, handler="tests.handlers.echo"):
        task = claimed(atp.enqueue("tests.echo", inputs))
        started = engine.start_and_load(task.pk, attempt=task.attempt, daemon=daemon)
        return execution.execute(started, task.attempt, handler, "host:1", resolved=resolved)

    assert run(1).status == Status.FINISHED
    assert resolved == {"tests.handlers.echo": tests.handlers.echo}
    monkeypatch.setattr(execution, "resolve_handler", lambda *args, **kwargs: 1 / 0)
    outcome = run(2)  # from the memo: not resolved again
    assert (outcome.status, outcome.response[0]) == (Status.FINISHED, b"2")
    monkeypatch.undo()
    assert run(3, handler="os.system").status == Status.ACCEPTED  # handed back
    assert list(resolved) == ["tests.handlers.echo"]
