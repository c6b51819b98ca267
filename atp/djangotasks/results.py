"""A ``TaskResult`` read from atp's rows: the task, its history and its response.

Status (atp → the framework): ACCEPTED and SCHEDULED (waiting, or claimed and not yet
begun) are READY; RUNNING and PAUSED are RUNNING; FINISHED is SUCCESSFUL; FAILED is
FAILED; CANCELLED is the framework's CANCELLED where the installed version has one,
else FAILED. Times: ``enqueued_at`` is the task's creation, ``started_at`` the start of
its first attempt, ``last_attempted_at`` the start of its latest, ``finished_at`` its
end. ``worker_ids`` has one entry per attempt that started: the daemon that ran it.
``errors`` has one ``TaskError`` per failed attempt, failed for good or retried by the
queue's retry policy: the exception's class path (as the runner noted it) and its
traceback.
"""

import copy

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from atp.djangotasks import config, known
from atp.djangotasks.compat import (
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
)
from atp.exceptions import InvalidHandler
from atp.models import Instance, LogRecord, Response
from atp.states import Status

#: The history line the runner writes before a failing attempt's end: then the
#: exception's class path.
EXCEPTION_MARK = "exception: "

STATUS = {
    Status.ACCEPTED: TaskResultStatus.READY,
    Status.SCHEDULED: TaskResultStatus.READY,
    Status.RUNNING: TaskResultStatus.RUNNING,
    Status.PAUSED: TaskResultStatus.RUNNING,
    Status.FINISHED: TaskResultStatus.SUCCESSFUL,
    Status.FAILED: TaskResultStatus.FAILED,
    Status.CANCELLED: getattr(TaskResultStatus, "CANCELLED", TaskResultStatus.FAILED),
}


def result_key(result_id):
    """Return the atp task key of a result id; raise ``TaskResultDoesNotExist``."""
    text = str(result_id)
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        raise TaskResultDoesNotExist(f"no task result has the id {result_id!r}")
    return int(text)


def load(alias, result_id):
    """Return the ``TaskResult`` of ``result_id`` for backend ``alias``; raise
    ``TaskResultDoesNotExist`` when there is no such task, or it is an atp task that
    is not a Django task of that backend."""
    pk = result_key(result_id)
    instance = Instance.objects.select_related("type", "inputs").filter(pk=pk).first()
    if instance is None:
        raise TaskResultDoesNotExist(f"no task result has the id {result_id!r}")
    queue = config.parse_identifier(instance.type.identifier)
    if queue is None or queue[0] != alias:
        raise TaskResultDoesNotExist(
            f"atp task {pk} (of type {instance.type.identifier!r}) is not a Django task of "
            f"the {alias!r} backend")
    history = list(LogRecord.objects.filter(instance_id=pk).order_by("id").values_list(
        "time", "status", "attempt", "message", "daemon"))
    return build(alias, instance, history)


def build(alias, instance, history, *, running=None):
    """Return the ``TaskResult`` of ``instance`` (with its type and inputs) and its
    ``history`` (``(time, status, attempt, message, daemon)`` in order).

    ``running`` is ``(attempt, daemon label)`` of the attempt a worker runs now: its start
    may not be written yet (a prefetched task's is written with the daemon's next round).
    """
    inputs = instance.inputs.load()
    if not isinstance(inputs, dict) or not isinstance(inputs.get("task"), str):
        raise TaskResultDoesNotExist(
            f"atp task {instance.pk} is in a Django Tasks queue but its inputs do not name a "
            "task function: it was not queued by ATPBackend")
    _, queue_name = config.parse_identifier(instance.type.identifier)
    task = task_of(inputs, alias, queue_name, instance.priority)
    starts, errors, marks = {}, [], {}
    for time, status, attempt, message, daemon in history:
        if status == Status.RUNNING and attempt not in starts:
            starts[attempt] = (time, daemon)
        elif status is None and message.startswith(EXCEPTION_MARK):
            marks[attempt] = message[len(EXCEPTION_MARK):].strip()
        elif status == Status.FAILED or (status == Status.ACCEPTED and attempt in marks):
            # The end of a failed attempt: for good, or retried by its queue's policy.
            errors.append(TaskError(exception_class_path=marks.pop(attempt, None)
                                    or _class_path(message), traceback=message))
    status = STATUS[instance.status]
    if running is not None:
        attempt, daemon = running
        starts.setdefault(attempt, (timezone.now(), daemon))
        status = TaskResultStatus.RUNNING
    times = [time for time, _ in starts.values()]
    result = TaskResult(
        task=task, id=str(instance.pk), status=status,
        enqueued_at=instance.created, started_at=min(times, default=None),
        finished_at=instance.finished if instance.status in (
            Status.FINISHED, Status.FAILED, Status.CANCELLED) else None,
        last_attempted_at=max(times, default=None),
        args=inputs.get("args", []), kwargs=inputs.get("kwargs", {}), backend=alias,
        errors=errors, worker_ids=[daemon or "atp" for _, daemon in starts.values()],
    )
    if instance.status == Status.FINISHED:
        object.__setattr__(result, "_return_value", return_value(instance.pk))
    return result


def task_of(inputs, alias, queue_name, priority):
    """Return the framework's ``Task`` the inputs name, as it was enqueued."""
    path = inputs["task"]
    try:
        task = known.find(path)
    except InvalidHandler as exc:
        raise TaskResultDoesNotExist(f"the task function of this result is not run: {exc}") from exc
    run_after = inputs.get("run_after")
    if run_after is not None:
        run_after = parse_datetime(run_after)
    # As it was enqueued, not validated again: its queue may have left QUEUES since (the
    # queue's type stays, and atpd still runs what it holds).
    enqueued = copy.copy(task)
    for name, value in (("priority", priority), ("queue_name", queue_name),
                        ("backend", alias), ("run_after", run_after)):
        object.__setattr__(enqueued, name, value)
    return enqueued


def return_value(pk):
    """Return what the task function returned (the runner stores it as JSON)."""
    response = Response.objects.filter(instance_id=pk).first()
    if response is None:
        return None
    return response.json().get("return_value")


def _class_path(message):
    """Return the class path of the error a FAILED history entry describes.

    A traceback's is read from its last line (Python writes builtins' without their
    module; the runner notes it exactly, this is for entries it could not note). An
    attempt that atp ended (a time-out, a worker's death with no restart left, inputs
    that cannot be loaded) raised nothing: ``TimeoutError`` for a time-out, else
    ``RuntimeError``, with atp's message as its traceback.
    """
    if not message.startswith("Traceback") and "Traceback (most recent call last)" not in message:
        return "builtins.TimeoutError" if "time-out" in message else "builtins.RuntimeError"
    lines = [line for line in message.strip().splitlines() if line and not line[0].isspace()]
    name = lines[-1].split(":", 1)[0].strip()
    if not name.replace(".", "").replace("_", "").isalnum():
        return "builtins.RuntimeError"
    return name if "." in name else f"builtins.{name}"
