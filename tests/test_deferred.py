"""``atp.defer``: any module-level function of an installed app, run by atpd."""

import datetime
import decimal
import json

import pytest

import atp
from atp.daemon.execution import run_task
from atp.exceptions import InvalidHandler, InvalidParameter, TaskAlreadyExists
from atp.models import Instance, Task
from atp.states import Status
from tests import handlers
from tests.processes import wait_until

pytestmark = pytest.mark.django_db


def run(instance, daemon):
    from tests.factories import claim_exactly

    claimed = claim_exactly(instance, daemon)
    run_task(claimed.pk, claimed.attempt, claimed.type.handler, daemon)
    return Instance.objects.get(pk=instance.pk)


def test_a_deferred_call_runs_with_its_arguments(daemon):
    task = atp.defer(handlers.multiply, 3, 4, factor=2)
    assert task.type.identifier == "atp.deferred"
    assert task.load_inputs() == {"function": "tests.handlers.multiply", "args": [3, 4],
                                  "kwargs": {"factor": 2}}
    done = run(task, daemon)
    assert done.status == Status.FINISHED
    assert atp.get_response(done).json() == {"product": 24}


def test_arguments_keep_the_types_atps_inputs_round_trip(daemon):
    moment = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    task = atp.defer("tests.handlers.describe", moment, (decimal.Decimal("1.5"), b"x"))
    assert atp.get_response(run(task, daemon)).json() == {
        "moment": moment.isoformat(), "types": ["Decimal", "bytes"]}


def test_the_options_are_enqueues(daemon):
    task = atp.defer(handlers.multiply, 1, 1, _name="once", _priority=7, _countdown=60)
    row = Task.objects.get(pk=task.pk)
    assert (task.identifier, task.priority) == ("once", 7)
    assert (row.not_before - row.enqueued).total_seconds() == pytest.approx(60)
    with pytest.raises(TaskAlreadyExists):
        atp.defer(handlers.multiply, 1, 1, _name="once")


def test_a_type_of_ones_own_runs_deferred_calls(daemon):
    atp.register_task_type("tests.slow_calls", "atp.deferred.run", timeout=5)
    task = atp.defer(handlers.multiply, 2, 5, _queue="tests.slow_calls")
    assert task.type.identifier == "tests.slow_calls"
    assert atp.get_response(run(task, daemon)).json() == {"product": 10}


def _nested():
    def inner():
        pass
    return inner


@pytest.mark.parametrize("func", [
    len, lambda: None, json.dumps, _nested(), "tests.handlers.nope", atp.engine.purge_type,
    "django.contrib.auth.models.update_last_login"],
    ids=["builtin", "lambda", "outside the apps", "nested", "no such", "atp's own verb",
         "django's"])
def test_a_function_atpd_could_not_run_is_refused_when_queued(func):
    before = Instance.objects.count()
    with pytest.raises(InvalidHandler):
        atp.defer(func)
    assert Instance.objects.count() == before


def test_a_type_that_does_not_run_deferred_calls_is_refused(noop_type):
    with pytest.raises(InvalidParameter, match="does not run deferred calls"):
        atp.defer(handlers.multiply, 1, 2, _queue="tests.noop")
    assert not Instance.objects.exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_daemon_runs_a_deferred_call(start_daemon):
    daemon = start_daemon("--workers", "1")
    task = atp.defer(handlers.multiply, 6, 7)
    wait_until(lambda: Instance.objects.get(pk=task.pk).status == Status.FINISHED, 30,
               message="the deferred call ran", output=daemon.output)
    assert atp.get_response(task).json() == {"product": 42}


def test_a_forged_call_of_atps_own_verbs_does_not_run(daemon, noop_type):
    """The path of a deferred call is in its inputs: one forged there is refused too."""
    from atp.deferred import run
    from atp.exceptions import InvalidHandler

    with pytest.raises(InvalidHandler, match="cannot be deferred"):
        run(None, {"function": "atp.engine.types.purge_type", "args": ["tests.noop"]})
