"""The ``task`` a handler receives: who the task is, and how it reports back."""

import logging
import time

from atp import engine
from atp.conf import conf
from atp.daemon.outage import CONNECTION_ERRORS, retry_while_unreachable
from atp.daemon.suspension import writing
from atp.engine.records import check_progress

logger = logging.getLogger(__name__)


class TaskContext:
    """The running attempt of one task, as its handler sees it.

    ``log`` and ``set_progress`` are advisory: while the database is unreachable they
    are dropped with a warning instead of failing the task. Progress is written at most
    every ``ATP_PROGRESS_INTERVAL_SECONDS`` (a handler reporting every row must not
    hammer the database); the latest value is kept and written by ``flush`` when the
    handler ends. ``set_response`` is kept: it waits for the database. Once the attempt
    is superseded (cancelled, re-enqueued, restarted elsewhere) each raises
    ``atp.exceptions.InvalidTransition``, so a handler that reports its progress also
    learns when to stop.
    """

    def __init__(self, instance, attempt, daemon=""):
        self.id = instance.pk
        self.identifier = instance.identifier
        self.type = instance.type.identifier
        self.priority = instance.priority
        self.restarts = instance.restarts
        self.attempt = attempt
        # App Engine's X-AppEngine-TaskRetryCount: the attempts before this one, for any
        # reason; and X-AppEngine-TaskExecutionCount: the earlier failures of the handler.
        self.retry_count = attempt - 1
        self.execution_count = instance.retries
        self.snoozes = instance.snoozes  # how often it snoozed before (atp.Snooze)
        self.daemon = daemon
        self._progress = None
        self._progress_written = float("-inf")

    def __repr__(self):
        return f"<TaskContext id={self.id} type={self.type} attempt={self.attempt}>"

    def log(self, message):
        """Add ``message`` to the task's history."""
        self._advisory(
            "log", lambda: engine.log(self.id, message, attempt=self.attempt, daemon=self.daemon)
        )

    def set_progress(self, done, total=None, message=""):
        """Record that ``done`` of ``total`` (if known) is done, with an optional message."""
        check_progress(done, total)
        self._progress = (done, total, message)
        if time.monotonic() - self._progress_written >= conf.PROGRESS_INTERVAL_SECONDS:
            self.flush()

    def flush(self):
        """Write the latest progress if it is not written yet."""
        if self._progress is None:
            return
        done, total, message = self._progress
        self._progress = None
        self._progress_written = time.monotonic()
        self._advisory("progress", lambda: engine.set_progress(
            self.id, done, total, message, attempt=self.attempt
        ))

    def set_response(self, data, content_type=None):
        """Store ``data`` (bytes, text or a JSON value) as the task's response now."""
        retry_while_unreachable(
            lambda: engine.set_response(self.id, data, content_type, attempt=self.attempt),
            f"response of task id={self.id}",
        )

    def _advisory(self, what, call):
        try:
            with writing():
                call()
        except CONNECTION_ERRORS as exc:
            logger.warning("task id=%s %s not recorded: database unreachable (%s)",
                           self.id, what, exc)
