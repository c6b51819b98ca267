"""ATPBackend without a daemon: validation, what enqueue writes, results, configuration."""

import datetime
import re
import sys

import pytest
from django.core.checks import run_checks
from django.db import transaction
from django.test import override_settings

import atp
from atp.djangotasks import config
from atp.djangotasks.compat import (
    InvalidTask,
    InvalidTaskBackend,
    TaskException,
    TaskResultDoesNotExist,
    TaskResultStatus,
)
from atp.exceptions import InputsNotSerializable, InputsTooLarge, QueueFull, TaskTypeNotFound
from atp.models import Instance, Type
from tests.djangotasks import functions
from tests.outside import tasks as outside_tasks

pytestmark = pytest.mark.django_db


def test_each_queue_is_an_atp_task_type_with_the_options_of_its_backend():
    result = functions.add.using(queue_name="brief").enqueue(1, 2)
    instance = Instance.objects.select_related("type").get(pk=int(result.id))
    assert instance.type.identifier == "django.tasks/default/brief"
    assert instance.type.handler == config.HANDLER
    assert (instance.type.timeout.total_seconds(), instance.type.max_restarts) == (3, 0)
    other = Type.objects.get(identifier="django.tasks/default/other")
    assert other.timeout.total_seconds() == 60  # the backend's default for every queue
    assert instance.load_inputs() == {"task": "tests.djangotasks.functions.add",
                                      "args": [1, 2], "kwargs": {}, "run_after": None}


def test_an_unknown_queue_is_refused_at_validation():
    with pytest.raises(InvalidTask, match="Queue 'nowhere' is not valid"):
        functions.add.using(queue_name="nowhere")


@pytest.mark.parametrize("argument, framework_error, message", [
    (datetime.datetime(2026, 1, 1), TypeError, "Unsupported type"),  # Django's own test
    (object(), TypeError, "Unsupported type"),
    (b"\xff", ValueError, "Unsupported value"),  # bytes that are not UTF-8
    ("half a pair: \ud800", TypeError, "lone surrogate"),  # refused by atp, not the framework
])
def test_arguments_that_are_not_json_raise_what_the_framework_raises_and_nothing_is_written(
        argument, framework_error, message):
    before = Instance.objects.count()
    with pytest.raises(framework_error, match=message) as caught:
        functions.echo.enqueue(argument)
    # And what callers of atp or of the backend before caught.
    assert isinstance(caught.value, InvalidTask) and isinstance(caught.value, InputsNotSerializable)
    assert Instance.objects.count() == before


def test_arguments_beyond_the_queues_input_limit_are_invalid_and_too_large():
    atp.register_task_type("django.tasks/default/other", config.HANDLER, max_input_bytes=100)
    with pytest.raises(InvalidTask, match="take at most 100 bytes") as caught:
        functions.echo.using(queue_name="other").enqueue("x" * 1000)
    assert isinstance(caught.value, InputsTooLarge)
    assert not Instance.objects.filter(type__identifier="django.tasks/default/other").exists()


def test_a_full_queue_is_a_task_exception_of_the_framework_and_atps_queue_full():
    atp.register_task_type("django.tasks/default/other", config.HANDLER, max_queued=1)
    functions.add.using(queue_name="other").enqueue(1, 1)
    with pytest.raises(TaskException) as caught:
        functions.add.using(queue_name="other").enqueue(1, 2)
    assert isinstance(caught.value, QueueFull)
    assert Instance.objects.filter(type__identifier="django.tasks/default/other").count() == 1


def test_a_queue_of_a_backend_whose_settings_cannot_work_is_an_invalid_backend(settings):
    tasks = {**settings.TASKS,
             "broken": {"BACKEND": config.BACKEND_PATH, "OPTIONS": {"timeout": "soon"}}}
    with override_settings(TASKS=tasks):
        with pytest.raises(InvalidTaskBackend, match="atp.E020") as caught:
            functions.add.using(backend="broken").enqueue(1, 1)
    assert isinstance(caught.value, TaskTypeNotFound)


def test_enqueue_is_part_of_the_callers_transaction():
    before = Instance.objects.count()
    with transaction.atomic():
        result = functions.add.enqueue(1, 1)
        transaction.set_rollback(True)
    assert Instance.objects.count() == before
    with pytest.raises(TaskResultDoesNotExist):
        functions.add.get_result(result.id)


def test_a_result_is_read_back_ready_with_its_priority():
    result = functions.add.using(priority=7).enqueue(1, 1)
    again = functions.add.get_result(result.id)
    assert again.status == TaskResultStatus.READY
    assert (again.task.priority, again.args, again.started_at) == (7, [1, 1], None)
    with pytest.raises(ValueError, match="not finished"):
        again.return_value  # noqa: B018


@pytest.mark.parametrize("result_id", ["999999", "abc", "", "-1", "1" * 40])
def test_an_unknown_result_id_does_not_exist(result_id):
    with pytest.raises(TaskResultDoesNotExist):
        functions.add.get_result(result_id)


def test_the_id_of_an_atp_task_that_is_not_a_django_task_is_refused_clearly(noop_type):
    plain = atp.enqueue("tests.noop")
    with pytest.raises(TaskResultDoesNotExist, match="is not a Django task"):
        functions.add.get_result(str(plain.pk))


def test_a_cancelled_task_is_failed_or_cancelled():
    result = functions.add.enqueue(1, 1)
    atp.cancel(int(result.id))
    result.refresh()
    expected = getattr(TaskResultStatus, "CANCELLED", TaskResultStatus.FAILED)
    assert result.status == expected and result.finished_at is not None


@pytest.mark.parametrize("options, message", [
    ({"timeout": "soon"}, "timeout"),
    ({"colour": "blue"}, "unknown OPTIONS 'colour'"),
    ({"QUEUES": {"elsewhere": {}}}, "queue 'elsewhere', which is not in QUEUES"),
    ({"QUEUES": {"default": {"max_concurrency": 0}}}, "max_concurrency"),
])
def test_a_tasks_setting_that_cannot_work_is_reported_by_the_checks(options, message):
    tasks = {"default": {"BACKEND": config.BACKEND_PATH, "OPTIONS": options}}
    with override_settings(TASKS=tasks):
        errors = [error for error in run_checks() if error.id == "atp.E020"]
    assert errors and message in errors[0].msg, errors


def test_a_good_tasks_setting_passes_the_checks():
    assert [error for error in run_checks() if error.id.startswith("atp.E02")] == []


def test_the_checks_say_when_the_framework_is_missing(monkeypatch):
    import sys

    # As on Django 4.2-5.2 without the backport: neither module can be imported.
    monkeypatch.delitem(sys.modules, "atp.djangotasks.compat")
    monkeypatch.setitem(sys.modules, "django.tasks", None)
    monkeypatch.setitem(sys.modules, "django_tasks", None)
    from atp.checks import check_django_tasks_backends

    # atp's check alone: Django 6's own checks import django.tasks, made missing here.
    [error] = [error for error in check_django_tasks_backends() if error.id == "atp.E021"]
    assert "install the backport" in error.msg


def test_a_queue_name_atpd_could_not_be_given_is_reported():
    tasks = {"default": {"BACKEND": config.BACKEND_PATH, "QUEUES": ["a,b"]}}
    with override_settings(TASKS=tasks):
        errors = [error for error in run_checks() if error.id == "atp.E020"]
    assert errors and "atpd --queues" in errors[0].msg, errors


def test_a_task_in_a_queues_type_not_queued_by_the_backend_is_refused_clearly():
    functions.add.enqueue(1, 1)  # the queue's type exists
    stray = atp.enqueue("django.tasks/default/default", {"not": "a call"})
    with pytest.raises(TaskResultDoesNotExist, match="not queued by ATPBackend"):
        functions.add.get_result(str(stray.pk))


def test_a_task_function_the_project_imports_at_start_up_is_queued_wherever_it_lives():
    # tests.outside is neither an installed app nor in ATP_HANDLER_MODULES: an installed
    # app imports it in its ready(), as Wagtail's imports modelsearch.tasks.
    result = outside_tasks.add.enqueue(2, 3)
    instance = Instance.objects.get(pk=int(result.id))
    assert instance.load_inputs()["task"] == "tests.outside.tasks.add"
    assert outside_tasks.add.get_result(result.id).args == [2, 3]


def test_a_task_function_made_after_start_up_outside_the_allowed_modules_is_refused_at_enqueue():
    import json

    made = functions.task()(json.dumps)  # applying @task never raises for where it lives
    before = Instance.objects.count()
    with pytest.raises(InvalidTask, match="json is not in an installed app or ATP_HANDLER_MODULES"):
        made.enqueue({})
    assert Instance.objects.count() == before


def test_a_task_whose_module_path_names_no_task_is_refused_at_enqueue():
    before = Instance.objects.count()
    with pytest.raises(InvalidTask, match="tests.outside.tasks._wrapped' is not a task function"):
        outside_tasks.renamed.enqueue(1)
    assert Instance.objects.count() == before


def test_a_task_whose_module_path_names_another_task_function_is_refused_at_enqueue():
    def add(a, b):
        return "not the add atpd would run"

    add.__module__, add.__qualname__ = functions.__name__, "add"
    impostor = functions.task()(add)
    with pytest.raises(InvalidTask, match="'tests.djangotasks.functions.add' is another task"):
        impostor.enqueue(1, 2)


@pytest.mark.parametrize("path, reason", [
    ("os.system", "os is not in an installed app"),
    ("json.dumps", "json is not in an installed app"),
    ("tests.outside.never_imported.boom", "tests.outside.never_imported is not in an installed"),
    ("tests.outside.tasks.plain", "is not in an installed app"),  # no task was made there
    ("tests.handlers.noop", "'tests.handlers.noop' is not a task function"),
    ("tests.djangotasks.functions.RECEIVERS", "is not a task function"),
    ("tests.djangotasks.gone.add", "cannot import tests.djangotasks.gone"),
])
def test_a_result_naming_anything_but_a_task_function_atp_may_run_is_refused(path, reason):
    functions.add.enqueue(1, 1)  # the queue's type exists
    forged = atp.enqueue("django.tasks/default/default",
                         {"task": path, "args": [], "kwargs": {}, "run_after": None})
    with pytest.raises(TaskResultDoesNotExist, match=re.escape(reason)):
        functions.add.get_result(str(forged.pk))
    assert "tests.outside.never_imported" not in sys.modules


def test_a_task_whose_queue_left_the_settings_is_still_read():
    result = functions.add.using(queue_name="other").enqueue(1, 2)
    shrunk = {"default": {"BACKEND": config.BACKEND_PATH, "QUEUES": ["default"]}}
    with override_settings(TASKS=shrunk):
        again = functions.add.get_result(result.id)
    assert (again.task.queue_name, again.args) == ("other", [1, 2])
