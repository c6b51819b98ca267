"""Errors raised by django-atp.

Each error's docstring is its default message, so ``raise TaskNotFound()`` already
says what went wrong; pass a more specific message where the caller knows more.
"""

import datetime

from django.core.exceptions import ImproperlyConfigured


class AtpError(Exception):
    """Base of every django-atp error; do not raise it directly."""

    def __init__(self, message=None):
        super().__init__(message or self.__doc__)


class InvalidParameter(AtpError, ValueError):
    """A parameter of a django-atp call is not valid."""


class TaskTypeNotFound(AtpError, LookupError):
    """No task type is registered under this identifier."""


class TaskTypeInUse(AtpError):
    """The task type still has tasks; delete or purge them first."""


class InvalidHandler(AtpError, ImproperlyConfigured):
    """The handler is not a module-level function of an installed app or ATP_HANDLER_MODULES."""


class TaskNotFound(AtpError, LookupError):
    """No such task."""


class TaskAlreadyExists(AtpError):
    """A live task of this type already has this identifier."""


class ScheduleNotFound(AtpError, LookupError):
    """No schedule has this name."""


class InvalidTransition(AtpError):
    """The task's state does not allow this change; nothing was changed."""

    def __init__(self, message=None, *, current=None, target=None):
        self.current = current
        self.target = target
        super().__init__(message)


class NotDelayed(InvalidTransition):
    """The task waits for no later time (it is runnable, or not waiting); nothing was changed."""


class AttemptSuperseded(InvalidTransition):
    """A newer attempt of this task has started; this write from an older attempt is ignored."""


class LeaseExpired(AttemptSuperseded):
    """The lease of this attempt expired (the task is leased again, or failed); its write is refused."""


class InputsNotSerializable(AtpError, TypeError):
    """The task's inputs cannot be stored; nothing was enqueued."""


class InputsTooLarge(AtpError, ValueError):
    """The task's inputs are larger than its type allows; nothing was enqueued."""


class TamperedInputs(AtpError):
    """The pickled inputs failed their signature check and were not unpickled."""


class InvalidResponse(AtpError, TypeError):
    """The response cannot be stored: give bytes, text or a JSON-serialisable value."""


class ResponseTooLarge(InvalidResponse):
    """The response is larger than its task type allows; it was not stored."""


class QueueFull(AtpError):
    """The queue of a task type holds its ``max_queued`` tasks, or the queue all of
    ``ATP_MAX_QUEUED_TOTAL``: nothing was queued."""


class DaemonStopped(AtpError):
    """This daemon was declared stopped; it may claim nothing more and must register again."""


class Retry(Exception):  # noqa: N818 (a request to the daemon, not an error of atp's)
    """Raised by a handler: retry this task after ``countdown`` seconds (None: the wait its
    type's retry policy gives), while that policy's limits allow; otherwise it fails."""

    def __init__(self, message="", *, countdown=None):
        if countdown is not None and (isinstance(countdown, bool) or not isinstance(
                countdown, (int, float)) or not 0 <= countdown <= 10**9):
            raise InvalidParameter(f"countdown must be a number of seconds, not {countdown!r}")
        super().__init__(message)
        self.countdown = countdown


class Snooze(Exception):  # noqa: N818 (a request to the daemon, not an error of atp's)
    """Raised by a handler: this task cannot go on yet; put it back to wait ``seconds`` (a
    number, or a timedelta), then run it again. The attempt ends without counting as a
    failure, a retry or a restart; the task's history says it snoozed, and ``message``
    why. Its type's ``max_snoozes`` bounds how often a task may snooze: the snooze after
    them fails it."""

    def __init__(self, seconds, message=""):
        given = seconds
        if isinstance(seconds, datetime.timedelta):
            seconds = seconds.total_seconds()
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not (
                0 <= seconds <= 10**9):
            raise InvalidParameter(f"a snooze lasts a number of seconds from 0 to 10**9, or "
                                   f"a timedelta, not {given!r}")
        super().__init__(message)
        self.seconds = float(seconds)
        self.message = message


class PermanentFailure(Exception):  # noqa: N818
    """Raised by a handler: fail this task for good, whatever its type's retry policy."""
