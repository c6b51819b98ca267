"""Running one attempt of one task inside a worker, from its claim to its end."""

import logging
import traceback

from atp import engine
from atp.conf import conf
from atp.daemon import suspension
from atp.daemon.context import TaskContext
from atp.daemon.outage import discard_broken_connections, retry_while_unreachable
from atp.exceptions import (
    InvalidHandler,
    InvalidResponse,
    InvalidTransition,
    TamperedInputs,
    TaskNotFound,
)
from atp.registry import resolve_handler

logger = logging.getLogger(__name__)

ENDINGS = {engine.finish: "finished", engine.fail: "failed"}


def run_task(pk, attempt, handler_path, daemon=""):
    """Run attempt ``attempt`` of task ``pk`` with the handler its type names, and record the end.

    Handler exceptions fail the task; a ``SystemExit`` or a crash ends the worker,
    and the supervisor restarts the task. Database outages are waited out.
    """
    discard_broken_connections()
    try:
        handler = resolve_handler(handler_path)
    except InvalidHandler as exc:
        _record(engine.fail, pk, attempt, daemon, message=f"not run: {exc}")
        return
    try:
        instance = retry_while_unreachable(
            lambda: engine.start_and_load(pk, attempt=attempt, daemon=daemon),
            f"start of task id={pk}",
        )
    except (InvalidTransition, TaskNotFound) as exc:
        logger.info("task id=%s attempt=%s superseded before it started: %s", pk, attempt, exc)
        return
    try:
        inputs = instance.inputs.load()
    except TamperedInputs as exc:
        _record(engine.fail, pk, attempt, daemon, message=f"not run: {exc}")
        return
    logger.info("task id=%s type=%s attempt=%s running", pk, instance.type.identifier, attempt)
    task = TaskContext(instance, attempt, daemon)
    try:
        with suspension.handler_running():
            result = handler(task, inputs)
    except Exception:
        message = describe_failure()
        _flush_progress(task)
        _record(engine.fail, pk, attempt, daemon, message=message)
        return
    _flush_progress(task)
    try:
        _record(engine.finish, pk, attempt, daemon, response=result)
    except InvalidResponse as exc:
        _record(engine.fail, pk, attempt, daemon, message=f"{exc} (the handler returned it)")


def _flush_progress(task):
    try:
        task.flush()
    except (InvalidTransition, TaskNotFound):
        pass  # superseded or deleted: recording the end says so


def _record(verb, pk, attempt, daemon, **details):
    """Apply a queue verb for this attempt; return False if the attempt was superseded."""
    try:
        retry_while_unreachable(
            lambda: verb(pk, attempt=attempt, daemon=daemon, **details),
            f"{verb.__name__} of task id={pk}",
        )
    except (InvalidTransition, TaskNotFound) as exc:
        logger.info("task id=%s attempt=%s: %s ignored: %s", pk, attempt, verb.__name__, exc)
        return False
    logger.info("task id=%s attempt=%s %s", pk, attempt, ENDINGS.get(verb, verb.__name__))
    return True


def describe_failure():
    """Return the current exception's traceback, cut to its last ``ATP_TRACEBACK_MAX_CHARS``."""
    text = traceback.format_exc()
    limit = conf.TRACEBACK_MAX_CHARS
    if len(text) <= limit:
        return text
    return f"[first {len(text) - limit} characters cut]\n{text[-limit:]}"
