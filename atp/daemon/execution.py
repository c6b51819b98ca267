"""Running one attempt of one task inside a worker, from its start to its outcome.

The supervisor claims a task for an idle worker and starts it (RUNNING) in the same
statement, then hands the worker the task with its type and inputs. The attempt
goes through named steps: find the handler, decode the inputs, run the handler,
encode what it returned. How it ended goes back to the supervisor as an
``Outcome``, which writes the outcomes of the same moment together
(``atp.daemon.recording``). Whatever goes wrong in a step of atp's own, outside the
handler, ends the task FAILED on this attempt with the reason, and the worker lives
on: the outcome would be the same on every restart, so restarting would only run the
handler again and bury the real error. Whatever the handler raises, ``SystemExit``
and ``KeyboardInterrupt`` included, is a failure of the handler: one failed attempt,
through its type's retry policy. Only the death of the worker process (``os._exit``,
a crash, a signal, the OOM killer) costs a restart.
"""

import logging
import traceback

from atp import engine, telemetry
from atp.conf import conf
from atp.daemon import suspension
from atp.daemon.context import TaskContext
from atp.daemon.outage import discard_broken_connections, retry_while_unreachable
from atp.daemon.recording import describe_error, record
from atp.engine.outcomes import Outcome
from atp.exceptions import (
    InvalidHandler,
    InvalidResponse,
    InvalidTransition,
    PermanentFailure,
    Retry,
    Snooze,
    TaskNotFound,
)
from atp.registry import resolve_handler
from atp.retry import RetryPolicy
from atp.serialization import storable
from atp.states import Status

logger = logging.getLogger(__name__)


def execute(instance, attempt, handler_path, daemon="", *, resolved=None):
    """Run attempt ``attempt`` of the started task ``instance`` (loaded with its type and
    inputs) with the handler ``handler_path``; return its ``Outcome``.

    Nothing is written but what the handler's context writes (progress, log lines, a
    response set early). Whatever the handler raises and errors of atp's own steps make
    a FAILED outcome; a crash ends the worker, and the supervisor restarts the task. A
    handler this worker has not loaded hands the task back. ``resolved`` is a worker's
    memo of the handlers it found, by path: its code and settings stay as they are while
    it lives (resolving a path again was a tenth of a worker's time for a no-op).
    """
    pk = instance.pk
    discard_broken_connections()
    handler = None if resolved is None else resolved.get(handler_path)
    if handler is None:
        try:
            handler = resolve_handler(handler_path, may_import=False)
        except InvalidHandler as exc:
            # Not this daemon's to run (its supervisor claims only the types whose handler
            # it loaded): back to the queue for one that has the code, no restart spent.
            return Outcome.handed_back(pk, attempt,
                                       storable(f"not run by daemon {daemon}: {exc}"))
        if resolved is not None:
            resolved[handler_path] = handler
    try:
        inputs = instance.inputs.load()
    except Exception as exc:  # a forged pickle, a class that is gone, bad JSON...
        return Outcome.failed(
            pk, attempt, f"not run: its inputs cannot be loaded ({describe_error(exc)})")
    logger.info("task id=%s type=%s attempt=%s running", pk, instance.type.identifier, attempt)
    task = TaskContext(instance, attempt, daemon)
    try:
        with suspension.handler_running(), telemetry.processing(instance, attempt):
            result = handler(task, inputs)
    except Retry as exc:  # the handler asks for a retry: its type's limits decide
        message = describe_failure()
        _flush_progress(task)
        return Outcome.failed(pk, attempt, message, may_retry=True, countdown=exc.countdown)
    except PermanentFailure:
        message = describe_failure()
        _flush_progress(task)
        return Outcome.failed(pk, attempt, message)
    except Snooze as exc:  # not a failure: the task waits and runs again
        _flush_progress(task)
        return Outcome.snoozed(pk, attempt, exc.seconds, storable(str(exc.message)))
    except BaseException:
        # SystemExit and KeyboardInterrupt too: here they can only be the handler's own
        # (sys.exit(), a Ctrl-C of its code). The worker ignores SIGINT, and SIGTERM from
        # its supervisor kills it outright, raising nothing.
        message = describe_failure()
        _flush_progress(task)
        return Outcome.failed(pk, attempt, message,
                              may_retry=RetryPolicy.of(instance.type).retries)
    _flush_progress(task)
    try:
        return Outcome.finished(pk, attempt, result,
                                max_bytes=instance.type.max_response_bytes)
    except InvalidResponse as exc:
        return Outcome.failed(pk, attempt, f"{exc} (the handler returned it)")


def has_expired(task, held_for):
    """Return whether ``task``, claimed and not started (SCHEDULED: prefetched), expired
    before its worker reached it, ``held_for`` seconds after its claim came back.

    Its time left is counted from its claim (``updated``, on the database clock, as its
    ``expires`` is) on this host's steady clock, so no two clocks need agree; the
    round trip of the claim is not counted. A task the claim started (RUNNING) started
    before it expired: the claim takes no expired task."""
    if task.expires is None or task.status != Status.SCHEDULED:
        return False
    return held_for >= (task.expires - task.updated).total_seconds()


def run_task(pk, attempt, handler_path, daemon=""):
    """Run attempt ``attempt`` of the SCHEDULED task ``pk`` in this process: start it, run
    it, and record how it ended, each write on its own (no batching).

    For running a claimed task by hand (``dequeue``, then this) and for tests; atpd's
    workers get their tasks started by the supervisor's claim instead.
    """
    discard_broken_connections()
    try:
        resolve_handler(handler_path, may_import=False)
    except InvalidHandler as exc:
        record(Outcome.handed_back(pk, attempt, storable(f"not run by daemon {daemon}: {exc}")),
               daemon, wait=True)
        return
    instance = _start(pk, attempt, daemon)
    if instance is not None:
        record(execute(instance, attempt, handler_path, daemon), daemon, wait=True)


def _start(pk, attempt, daemon):
    """Start the attempt; return the task loaded, or None when there is nothing to run."""
    try:
        return retry_while_unreachable(
            lambda: engine.start_and_load(pk, attempt=attempt, daemon=daemon),
            f"start of task id={pk}",
        )
    except (InvalidTransition, TaskNotFound) as exc:
        logger.info("task id=%s attempt=%s superseded before it started: %s", pk, attempt, exc)
    except Exception as exc:
        logger.exception("task id=%s attempt=%s could not start", pk, attempt)
        record(Outcome.failed(pk, attempt,
                              f"not run: atp could not start it ({describe_error(exc)})"),
               daemon, wait=True)
    return None


def _flush_progress(task):
    try:
        task.flush()
    except (InvalidTransition, TaskNotFound):
        pass  # superseded or deleted: recording the end says so
    except Exception:
        logger.exception("task id=%s: its last progress could not be recorded", task.id)


def describe_failure():
    """Return the current exception's traceback, cut to its last ``ATP_TRACEBACK_MAX_CHARS``.

    What no database stores (a NUL, a lone surrogate) is written as an escape.
    """
    text = storable(traceback.format_exc())
    limit = conf.TRACEBACK_MAX_CHARS
    if len(text) <= limit:
        return text
    return f"[first {len(text) - limit} characters cut]\n{text[-limit:]}"

