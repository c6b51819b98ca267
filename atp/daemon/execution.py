"""Running one attempt of one task inside a worker, from its claim to its end.

The attempt goes through named steps: find the handler, start (SCHEDULED to
RUNNING, loading the type and inputs), decode the inputs, run the handler, record
the end. Whatever goes wrong in a step of atp's own, outside the handler, ends the
task FAILED on this attempt with the reason, and the worker lives on: the outcome
would be the same on every restart, so restarting would only run the handler
again and bury the real error. Only the death of the worker process (a crash,
``sys.exit``, a signal) costs a restart. Database outages are waited out.
"""

import logging
import traceback

from atp import engine
from atp.conf import conf
from atp.daemon import suspension
from atp.daemon.context import TaskContext
from atp.daemon.outage import discard_broken_connections, retry_while_unreachable
from atp.exceptions import InvalidHandler, InvalidResponse, InvalidTransition, TaskNotFound
from atp.registry import resolve_handler
from atp.serialization import storable

logger = logging.getLogger(__name__)

ENDINGS = {engine.finish: "finished", engine.fail: "failed"}
#: What a task's history says when even the reason of its failure cannot be written.
UNRECORDABLE = "atp could not record how this attempt ended; see the daemon's log"


def run_task(pk, attempt, handler_path, daemon=""):
    """Run attempt ``attempt`` of task ``pk`` with the handler its type names, and record the end.

    Handler exceptions and errors of atp's own steps fail the task; a ``SystemExit``
    or a crash ends the worker, and the supervisor restarts the task. A handler this
    worker has not loaded hands the task back.
    """
    discard_broken_connections()
    try:
        handler = resolve_handler(handler_path, may_import=False)
    except InvalidHandler as exc:
        # Not this daemon's to run (its supervisor claims only the types whose handler
        # it loaded): back to the queue for one that has the code, no restart spent.
        _record(engine.hand_back, pk, attempt, daemon,
                message=storable(f"not run by daemon {daemon}: {exc}"))
        return
    instance = _start(pk, attempt, daemon)
    if instance is None:
        return
    try:
        inputs = instance.inputs.load()
    except Exception as exc:  # a forged pickle, a class that is gone, bad JSON...
        _record(engine.fail, pk, attempt, daemon,
                message=f"not run: its inputs cannot be loaded ({describe_error(exc)})")
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
        _record(engine.fail, pk, attempt, daemon,
                message=f"not run: atp could not start it ({describe_error(exc)})")
    return None


def _flush_progress(task):
    try:
        task.flush()
    except (InvalidTransition, TaskNotFound):
        pass  # superseded or deleted: recording the end says so
    except Exception:
        logger.exception("task id=%s: its last progress could not be recorded", task.id)


def _record(verb, pk, attempt, daemon, **details):
    """Apply a queue verb for this attempt; return False if the attempt was superseded.

    ``InvalidResponse`` goes to the caller, which fails the task with it. Any other
    error (a value the database refuses) fails the task with that reason.
    """
    try:
        retry_while_unreachable(
            lambda: verb(pk, attempt=attempt, daemon=daemon, **details),
            f"{verb.__name__} of task id={pk}",
        )
    except (InvalidTransition, TaskNotFound) as exc:
        logger.info("task id=%s attempt=%s: %s ignored: %s", pk, attempt, verb.__name__, exc)
        return False
    except InvalidResponse:
        raise
    except Exception as exc:
        logger.exception("task id=%s attempt=%s: %s failed", pk, attempt, verb.__name__)
        return _fail_anyway(pk, attempt, daemon, exc)
    logger.info("task id=%s attempt=%s %s", pk, attempt, ENDINGS.get(verb, verb.__name__))
    return True


def _fail_anyway(pk, attempt, daemon, exc):
    """Fail the task saying why its end could not be recorded; raise if nothing can be."""
    reasons = (f"atp could not record how this attempt ended ({describe_error(exc)})",
               UNRECORDABLE)
    for reason in reasons:
        try:
            retry_while_unreachable(
                lambda: engine.fail(pk, reason, attempt=attempt, daemon=daemon),  # noqa: B023
                f"fail of task id={pk}",
            )
        except (InvalidTransition, TaskNotFound):
            return False
        except Exception:
            logger.exception("task id=%s attempt=%s: recording the failure failed", pk, attempt)
        else:
            return True
    # The worker dies of it, and the supervisor restarts the task: the last resort.
    raise RuntimeError(f"task id={pk}: the database refuses every end of attempt {attempt}")


def describe_error(exc):
    """Return ``Class: message`` of an exception, as a task's history can store it."""
    return storable(f"{type(exc).__name__}: {exc}")


def describe_failure():
    """Return the current exception's traceback, cut to its last ``ATP_TRACEBACK_MAX_CHARS``.

    What no database stores (a NUL, a lone surrogate) is written as an escape.
    """
    text = storable(traceback.format_exc())
    limit = conf.TRACEBACK_MAX_CHARS
    if len(text) <= limit:
        return text
    return f"[first {len(text) - limit} characters cut]\n{text[-limit:]}"

