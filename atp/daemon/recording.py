"""Writing how attempts ended, as the workers report it.

The supervisor gathers the outcomes its workers report and writes those of one round
together (``settle``: one statement on PostgreSQL, one transaction on SQLite), each
guarded and fenced by its attempt, with its history entry. A batch the database
refuses for another reason than a lost connection (a value it will not store) is
written one outcome at a time, and an outcome refused alone fails its task with the
reason. An outcome whose attempt was superseded (an operator ended or re-enqueued the
task, a reaper restarted it) is dropped: the task went on without it.
"""

import logging

from atp import engine
from atp.daemon.outage import CONNECTION_ERRORS, TASK_MOVED_ON, retry_while_unreachable
from atp.engine.lifecycle import settle as settle_outcomes
from atp.engine.outcomes import Outcome
from atp.engine.transitions import refusal
from atp.serialization import storable
from atp.states import Status

logger = logging.getLogger(__name__)

#: What a task's history says when even the reason of its failure cannot be written.
UNRECORDABLE = "atp could not record how this attempt ended; see the daemon's log"
DONE = {Status.FINISHED: "finished", Status.FAILED: "failed", Status.ACCEPTED: "handed back",
        Status.RUNNING: "started", Status.CANCELLED: "expired before it started"}


def settle(daemon, outcomes):
    """Write ``outcomes`` (``atp.engine.outcomes.Outcome``) of ``daemon``'s workers.

    Raise a connection error when the database is away: nothing of the batch was
    written then (a hand-back may have been; written again, it is refused), and the
    caller keeps the outcomes to write them all again.
    """
    ends = []
    for outcome in outcomes:
        if outcome.alone:
            record(outcome, daemon)
        else:
            ends.append(outcome)
    if not ends:
        return
    try:
        written = settle_outcomes(daemon, ends)
    except CONNECTION_ERRORS:
        raise
    except Exception:
        logger.exception("the ends of %s attempts could not be written together; writing "
                         "each alone", len(ends))
        for outcome in ends:
            record(outcome, daemon)
        return
    report(ends, written)


def report(outcomes, written):
    """Log which of ``outcomes`` were written (their keys are in ``written``) and which not."""
    for outcome in outcomes:
        if outcome.pk in written:
            _log_written(outcome)
        else:
            logger.info("task id=%s attempt=%s: its %s (%s) is ignored: the task went on "
                        "without it", outcome.pk, outcome.attempt, _what(outcome),
                        outcome.status)


def _what(outcome):
    return "start" if outcome.status == Status.RUNNING else "end"


def record(outcome, daemon, *, wait=False):
    """Write one outcome by itself; return whether it was written.

    With ``wait`` a database outage is waited out (a process's own task, as in
    ``run_task``); otherwise connection errors go to the caller.
    """
    try:
        if wait:
            retry_while_unreachable(lambda: _write(outcome, daemon),
                                    f"end of task id={outcome.pk}")
        else:
            _write(outcome, daemon)
    except CONNECTION_ERRORS:
        raise
    except TASK_MOVED_ON as exc:
        logger.info("task id=%s attempt=%s: its %s (%s) is ignored: %s",
                    outcome.pk, outcome.attempt, _what(outcome), outcome.status, exc)
        return False
    except Exception as exc:
        logger.exception("task id=%s attempt=%s: writing its %s (%s) failed",
                         outcome.pk, outcome.attempt, _what(outcome), outcome.status)
        if outcome.status == Status.RUNNING:
            return False  # its end, written with its start, comes later
        return _fail_anyway(outcome, daemon, exc, wait)
    _log_written(outcome)
    return True


def _write(outcome, daemon):
    pk, attempt = outcome.pk, outcome.attempt
    if outcome.status == Status.ACCEPTED and not outcome.snoozes:
        engine.hand_back(pk, outcome.message, attempt=attempt, daemon=daemon)
    elif outcome.status == Status.CANCELLED:
        engine.expire_attempt(pk, attempt=attempt, daemon=daemon)
    elif outcome.may_retry or outcome.snoozes:
        if outcome.started_ago is not None:  # a prefetched attempt: its start first
            settle_outcomes(daemon, [Outcome.started(pk, attempt, outcome.started_ago)])
        if outcome.snoozes:
            engine.snooze(pk, outcome.countdown, outcome.message, attempt=attempt,
                          daemon=daemon)
        else:
            engine.fail_or_retry(pk, outcome.message, attempt=attempt, daemon=daemon,
                                 countdown=outcome.countdown)
    elif pk not in settle_outcomes(daemon, [outcome]):
        raise refusal(pk, outcome.status, attempt=attempt)


def _log_written(outcome):
    if outcome.status != Status.RUNNING:  # a start is not worth a line of its own
        logger.info("task id=%s attempt=%s %s", outcome.pk, outcome.attempt,
                    "snoozed" if outcome.snoozes else DONE[outcome.status])


def _fail_anyway(outcome, daemon, exc, wait):
    """Fail the task saying why its end could not be written; raise if nothing can be."""
    pk, attempt = outcome.pk, outcome.attempt
    reasons = (f"atp could not record how this attempt ended ({describe_error(exc)})",
               UNRECORDABLE)
    for reason in reasons:
        def fail(reason=reason):
            return engine.fail(pk, reason, attempt=attempt, daemon=daemon)

        try:
            if wait:
                retry_while_unreachable(fail, f"fail of task id={pk}")
            else:
                fail()
        except CONNECTION_ERRORS:
            raise
        except TASK_MOVED_ON:
            return False
        except Exception:
            logger.exception("task id=%s attempt=%s: recording the failure failed", pk, attempt)
        else:
            return True
    if wait:  # the process dies of it, and its task is restarted: the last resort
        raise RuntimeError(f"task id={pk}: the database refuses every end of attempt {attempt}")
    # The supervisor lives on; its check of its leases finds this one run by no worker
    # and hands the task back.
    logger.error("task id=%s: the database refuses every end of attempt %s", pk, attempt)
    return False


def describe_error(exc):
    """Return ``Class: message`` of an exception, as a task's history can store it."""
    return storable(f"{type(exc).__name__}: {exc}")
