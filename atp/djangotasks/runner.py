"""The handler of every Django Tasks queue: run the task function an atp task names.

atpd runs it like any handler (time-out, restarts, fencing, pause, history); a row
naming what is not a task function atp runs (``atp.djangotasks.known``) fails for good,
nothing imported. It sends
the framework's ``task_started`` and ``task_finished`` signals in the worker, around
the call, with a ``TaskResult`` read from atp's rows; a ``takes_context`` function gets
a ``TaskContext`` whose ``attempt`` counts the attempts that started, this one
included. An exception the function raises (any ``BaseException``: ``SystemExit`` and
``KeyboardInterrupt`` too, as Django's own backends record them) fails the attempt:
the runner notes its class path in the history, and atp writes its traceback with the
FAILED state, or retries it by the queue's retry policy. What
the function returns is stored as the task's JSON response ``{"return_value": ...}``.
"""

import logging
import traceback

from django.utils import timezone

from atp.djangotasks import config, results
from atp.djangotasks.compat import (
    TaskContext,
    TaskError,
    TaskResultDoesNotExist,
    TaskResultStatus,
    framework,
    normalize_json,
    task_finished,
    task_started,
)
from atp.engine.base import daemon_label
from atp.exceptions import PermanentFailure
from atp.models import Instance, LogRecord

logger = logging.getLogger(__name__)


def run(task, inputs):
    """Run the task function of ``inputs`` (``task``, ``args``, ``kwargs``) for atp's
    running ``task``; return its value for the response."""
    alias, _ = config.parse_identifier(task.type)
    backend = framework.task_backends[alias]
    try:
        result = _running_result(task, alias)
    except TaskResultDoesNotExist as exc:
        # Not a task function atp runs (atp.djangotasks.known): it never will be.
        raise PermanentFailure(f"not run: {exc}") from exc
    task_started.send(sender=type(backend), task_result=result)
    function = result.task
    try:
        if function.takes_context:
            value = function.call(TaskContext(task_result=result), *result.args, **result.kwargs)
        else:
            value = function.call(*result.args, **result.kwargs)
        value = normalize_json(value)
    except BaseException as exc:  # one failed attempt, whatever it is (atp.daemon.execution)
        kind = type(exc)
        path = f"{kind.__module__}.{kind.__qualname__}"
        try:
            task.log(f"{results.EXCEPTION_MARK}{path}")
        except Exception:  # superseded meanwhile: the function's error is the one to raise
            logger.info("task id=%s: its exception class could not be noted", task.id)
        result.errors.append(TaskError(exception_class_path=path,
                                       traceback="".join(traceback.format_exception(exc))))
        _ended(result, TaskResultStatus.FAILED)
        task_finished.send(sender=type(backend), task_result=result)
        raise
    _ended(result, TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "_return_value", value)
    task_finished.send(sender=type(backend), task_result=result)
    return {"return_value": value}


def _running_result(task, alias):
    """Return the ``TaskResult`` of the running attempt, from the rows as they are now."""
    instance = Instance.objects.select_related("type", "inputs").get(pk=task.id)
    history = list(LogRecord.objects.filter(instance_id=task.id).order_by("id").values_list(
        "time", "status", "attempt", "message", "daemon"))
    return results.build(alias, instance, history,
                         running=(task.attempt, daemon_label(task.daemon)))


def _ended(result, status):
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", timezone.now())
