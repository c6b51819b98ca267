import pytest

import atp
from atp import engine
from atp.exceptions import InvalidParameter, InvalidResponse, InvalidTransition, TaskNotFound
from atp.models import Instance, LogRecord, Response
from atp.states import Status
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


def test_a_response_keeps_bytes_and_their_content_type(noop_type):
    instance = TaskFactory(type=noop_type, status=Status.FINISHED)
    atp.set_response(instance, b"\x89PNG\r\n", "image/png")
    response = atp.get_response(instance)
    assert (bytes(response.data), response.content_type, response.size) == (b"\x89PNG\r\n", "image/png", 6)
    assert not response.is_text
    with pytest.raises(ValueError, match="binary"):
        _ = response.text


def test_a_text_response_comes_back_as_text(noop_type):
    instance = TaskFactory(type=noop_type)
    atp.set_response(instance.pk, "<Capabilities/>", "application/xml")
    response = atp.get_response(instance.pk)
    assert (response.text, response.content_type, response.charset) == ("<Capabilities/>", "application/xml", "utf-8")


def test_a_json_response_replaces_the_previous_one(noop_type):
    instance = TaskFactory(type=noop_type, status=Status.RUNNING)
    atp.set_response(instance, "first")
    atp.set_response(instance, {"rows": 3})
    assert atp.get_response(instance).json() == {"rows": 3}
    assert Response.objects.count() == 1


def test_responses_are_refused_for_bad_data_or_missing_tasks(noop_type):
    instance = TaskFactory(type=noop_type)
    with pytest.raises(InvalidResponse):
        atp.set_response(instance, object())
    with pytest.raises(TaskNotFound):
        atp.set_response(424242, "x")
    assert atp.get_response(instance) is None
    assert not Response.objects.exists()


def test_progress_is_recorded_while_the_task_runs(noop_type):
    instance = TaskFactory(type=noop_type, status=Status.RUNNING)
    engine.set_progress(instance, 3, 4, "three quarters", attempt=instance.attempt)
    stored = Instance.objects.get(pk=instance.pk)
    assert (stored.progress_done, stored.progress_total, stored.progress_message) == (3, 4, "three quarters")
    assert stored.progress_fraction == 0.75


def test_progress_of_a_task_that_does_not_run_is_refused(noop_type):
    instance = TaskFactory(type=noop_type, status=Status.FINISHED)
    with pytest.raises(InvalidTransition, match="is FINISHED: progress is recorded only while it runs"):
        engine.set_progress(instance, 1)
    running = TaskFactory(type=noop_type, status=Status.RUNNING)
    with pytest.raises(InvalidParameter, match="progress done must be a number"):
        engine.set_progress(running, "half")


def test_a_log_message_joins_the_history_without_changing_the_state(noop_type):
    instance = TaskFactory(type=noop_type, status=Status.RUNNING)
    engine.log(instance, "halfway there", attempt=instance.attempt, daemon="host:1")
    record = LogRecord.objects.filter(instance=instance).last()
    assert (record.status, record.message, record.attempt, record.daemon) == (None, "halfway there", 1, "host:1")
    assert Instance.objects.get(pk=instance.pk).status == Status.RUNNING


def test_an_attempt_that_no_longer_runs_cannot_write_to_its_task(noop_type):
    instance = TaskFactory(type=noop_type, status=Status.RUNNING)
    atp.cancel(instance)
    for late in (
        lambda: engine.set_response(instance, "late", attempt=1),
        lambda: engine.log(instance, "late", attempt=1),
        lambda: engine.set_progress(instance, 1, attempt=1),
    ):
        with pytest.raises(InvalidTransition, match="is CANCELLED"):
            late()
    assert not Response.objects.filter(instance=instance).exists()
    assert not LogRecord.objects.filter(instance=instance, message="late").exists()
