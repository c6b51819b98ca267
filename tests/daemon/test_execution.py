import pytest
from django.test import override_settings

import atp
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
    run_task(task.pk, task.attempt, task.type.handler)
    instance, last = ran(task)
    assert instance.status == Status.FAILED
    assert last.message == ("not run: handler 'os.system' is not in an installed app or in "
                            "ATP_HANDLER_MODULES; it is not run")
    assert not (tmp_path / "pwned").exists()
    assert not LogRecord.objects.filter(instance=task, status=Status.RUNNING).exists()


def test_tampered_pickled_inputs_are_never_unpickled(db, claimed):
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
