"""What a task records besides its state: its response, its progress, log messages.

None of these changes the state. Given the writer's ``attempt``, each is refused
with ``AttemptSuperseded`` once a newer attempt exists, so a lost worker cannot
overwrite the work of the attempt that replaced it.
"""

import math

from django.db.models.functions import Now

from atp.conf import conf
from atp.engine.base import daemon_label, load_on_access, pk_of, queue_write
from atp.engine.engines import engine
from atp.engine.transitions import refusal, write_history
from atp.exceptions import InvalidParameter, InvalidTransition, TaskNotFound
from atp.models import Instance, Response
from atp.serialization import check_text, encode_response
from atp.states import Status

PROGRESS_MESSAGE_MAX_LENGTH = Instance._meta.get_field("progress_message").max_length


#: The states in which an attempt's handler runs: SCHEDULED too, for a prefetched task
#: whose start its supervisor has not written yet (``atp.daemon.prefetch``).
RUNS = (Status.SCHEDULED, Status.RUNNING, Status.PAUSED)
#: The states in which a task's progress is written when the writer names no attempt.
PROGRESS_STATES = (Status.RUNNING, Status.PAUSED)


def _check_attempt(pk, attempt):
    """Raise unless ``attempt`` is still the running attempt of task ``pk`` (when given)."""
    if attempt is None:
        return
    row = Instance.objects.filter(pk=pk).values("status", "attempt").first()
    if row is not None and row["attempt"] == attempt and row["status"] in RUNS:
        return
    if row is not None and row["attempt"] == attempt:
        raise InvalidTransition(
            f"task #{pk} is {row['status']}: attempt {attempt} may no longer write to it",
            current=row["status"],
        )
    raise refusal(pk, None, attempt=attempt)


@queue_write
def set_response(instance, data, content_type=None, *, attempt=None):
    """Store ``data`` (bytes, text or a JSON value) as the task's response; return it.

    A second call replaces the first. With ``attempt`` (a handler's response) only
    while that attempt runs. Raise ``InvalidResponse`` for other data, and
    ``ResponseTooLarge`` beyond the type's ``max_response_bytes``.
    """
    pk = pk_of(instance)
    _check_attempt(pk, attempt)
    if not Instance.objects.filter(pk=pk).exists():
        raise refusal(pk, None)
    return store_response(pk, data, content_type)


def response_limit(pk):
    """Return the largest response task ``pk`` may store, in bytes."""
    limit = Instance.objects.filter(pk=pk).values_list("type__max_response_bytes", flat=True)
    return limit.first() or conf.MAX_RESPONSE_BYTES


def store_response(pk, data, content_type=None):
    """Write the response of task ``pk`` in the current transaction; return it.

    Raise ``InvalidResponse`` (or ``ResponseTooLarge``) before writing anything.
    """
    return store_encoded(pk, *encode_response(data, content_type, max_bytes=response_limit(pk)))


def store_encoded(pk, payload, content_type, charset):
    """Write an encoded response (``encode_response``'s) of task ``pk``; return it."""
    response, _ = Response.objects.update_or_create(
        instance_id=pk,
        defaults={"data": payload, "content_type": content_type, "charset": charset,
                  "size": len(payload), "stored": Now()},
    )
    return load_on_access(response, "stored")


def get_response(instance):
    """Return the task's ``Response`` (``data``, ``content_type``, ``text``), or None."""
    return Response.objects.filter(instance_id=pk_of(instance)).first()


def check_progress(done, total=None):
    """Raise ``InvalidParameter`` unless ``done`` (and ``total``, if given) are finite
    numbers the database stores (as double precision)."""
    for name, value in (("done", done), ("total", total)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidParameter(f"progress {name} must be a number, not {value!r}")
        try:
            finite = math.isfinite(float(value))
        except OverflowError:
            finite = False
        if not finite:
            raise InvalidParameter(f"progress {name} must be a finite number, not {value!r}")


def set_progress(instance, done, total=None, message="", *, attempt=None):
    """Record how far a running task got: ``done`` of ``total`` (if known) and a message."""
    pk = pk_of(instance)
    check_progress(done, total)
    message = str(message)
    check_text(message, "a progress message")
    engine().set_progress(pk, done, total, message[:PROGRESS_MESSAGE_MAX_LENGTH], attempt)


def set_progress_in_transaction(pk, done, total, message, attempt):
    """``set_progress``, checked, as the ORM writes it (the portable form of the verb)."""
    if attempt is not None:  # its handler's
        rows = Instance.objects.filter(pk=pk, status__in=RUNS, attempt=attempt)
    else:
        rows = Instance.objects.filter(pk=pk, status__in=PROGRESS_STATES)
    updated = rows.update(progress_done=done, progress_total=total, progress_message=message,
                          updated=Now())
    if not updated:
        raise progress_refusal(pk, attempt)


def progress_refusal(pk, attempt):
    """Return the error that explains why the progress of task ``pk`` was not written."""
    error = refusal(pk, Status.RUNNING, attempt=attempt)
    if type(error) is InvalidTransition:
        error = InvalidTransition(
            f"task #{pk} is {error.current}: progress is recorded only while it runs",
            current=error.current,
        )
    return error


def log(instance, message, *, attempt=None, daemon=None):
    """Add ``message`` to the task's history without changing its state.

    With ``attempt`` (a handler's line) only while that attempt runs.
    """
    pk = pk_of(instance)
    message = str(message)
    check_text(message, "a history message")
    engine().log(pk, message, attempt, daemon_label(daemon))


def log_in_transaction(pk, message, attempt, daemon):
    """``log``, checked, as the ORM writes it (the portable form of the verb)."""
    _check_attempt(pk, attempt)
    row = Instance.objects.filter(pk=pk).values("attempt").first()
    if row is None:
        raise refusal(pk, None)
    write_history(pk, None, row["attempt"], message, daemon)


def log_refusal(pk, attempt):
    """Return the error that explains why a line was not added to task ``pk``'s history."""
    try:
        _check_attempt(pk, attempt)
    except (InvalidTransition, TaskNotFound) as error:
        return error
    return refusal(pk, None)
