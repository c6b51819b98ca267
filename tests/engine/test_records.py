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


def test_a_superseded_attempt_cannot_log_nor_report_progress(noop_type):
    from atp.exceptions import AttemptSuperseded

    instance = TaskFactory(type=noop_type, status=Status.RUNNING)
    Instance.objects.filter(pk=instance.pk).update(attempt=2)  # as a restart elsewhere makes it
    with pytest.raises(AttemptSuperseded, match="attempt 1 was superseded by attempt 2"):
        engine.log(instance, "late", attempt=1)
    with pytest.raises(AttemptSuperseded, match="attempt 1 was superseded by attempt 2"):
        engine.set_progress(instance, 1, 2, attempt=1)
    assert not LogRecord.objects.filter(instance=instance, message="late").exists()
    assert Instance.objects.get(pk=instance.pk).progress_done is None


def test_a_prefetched_attempt_may_log_and_report_progress_before_its_start_is_written(noop_type):
    instance = TaskFactory(type=noop_type, status=Status.SCHEDULED)
    engine.log(instance, "begun", attempt=instance.attempt)
    engine.set_progress(instance, 1, 4, "a quarter", attempt=instance.attempt)
    record = LogRecord.objects.filter(instance=instance).last()
    assert (record.status, record.message, record.attempt) == (None, "begun", instance.attempt)
    stored = Instance.objects.get(pk=instance.pk)
    assert (stored.status, stored.progress_done, stored.progress_total) == (Status.SCHEDULED, 1, 4)
    # Without an attempt (not its handler's), progress waits for the task to run.
    with pytest.raises(InvalidTransition, match="is SCHEDULED: progress is recorded only while"):
        engine.set_progress(instance, 2, 4)


def test_writes_to_a_task_that_does_not_exist_are_refused(noop_type):
    for write in (lambda: engine.log(424242, "x"), lambda: engine.log(424242, "x", attempt=1),
                  lambda: engine.set_progress(424242, 1), lambda: engine.set_progress(424242, 1, attempt=1)):
        with pytest.raises(TaskNotFound):
            write()
    assert not LogRecord.objects.filter(instance_id=424242).exists()


def test_progress_keeps_integers_and_fractions_and_a_message_cut_to_fit(noop_type):
    from atp.engine.records import PROGRESS_MESSAGE_MAX_LENGTH

    instance = TaskFactory(type=noop_type, status=Status.RUNNING)
    for done, total in ((1, 3), (1.5, 3.25), (2**40, None)):
        engine.set_progress(instance, done, total, "m" * (PROGRESS_MESSAGE_MAX_LENGTH + 5),
                            attempt=instance.attempt)
        stored = Instance.objects.get(pk=instance.pk)
        assert (stored.progress_done, stored.progress_total) == (done, total)
        assert stored.progress_message == "m" * PROGRESS_MESSAGE_MAX_LENGTH
    with pytest.raises(InvalidParameter):
        engine.log(instance, "nul \x00 byte", attempt=instance.attempt)


def test_progress_that_is_no_finite_number_is_refused_before_anything_is_written(noop_type):
    instance = TaskFactory(type=noop_type, status=Status.RUNNING)
    for done, total in ((float("nan"), None), (1, float("inf")), (10**400, None)):
        with pytest.raises(InvalidParameter, match="must be a finite number"):
            engine.set_progress(instance, done, total, attempt=instance.attempt)
    assert Instance.objects.get(pk=instance.pk).progress_done is None
