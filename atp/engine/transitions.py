"""The guarded compare-and-set behind every state change, and the history it writes.

Locking order, the same in every transaction that writes both: a task's ``Task`` row
first, its ``Instance`` row second. Verbs that touch the queue row therefore do so
before calling ``move``, so two writers of one task queue up instead of deadlocking.
"""

from django.db.models import Subquery
from django.db.models.functions import Now

from atp.engine.base import actor_label, daemon_label
from atp.exceptions import AttemptSuperseded, InvalidTransition, TaskNotFound
from atp.models import Instance, LogRecord
from atp.serialization import check_text
from atp.states import describe_refusal, is_allowed


def move(pk, target, *, sources, attempt=None, changes=None, message="", daemon=None, by=None,
         dated_by="updated"):
    """Move task ``pk`` from one of ``sources`` to ``target`` and log it; return its attempt.

    Run inside a queue transaction. The row changes only while it is still in one of
    ``sources`` and still on ``attempt`` when one is given (fencing); otherwise raise
    ``AttemptSuperseded``, ``InvalidTransition`` or ``TaskNotFound`` and change
    nothing. ``by`` names the person who asked for it; ``dated_by`` names the column
    whose new value dates the history entry (default: ``updated``, now).
    """
    illegal = [source for source in sources if not is_allowed(source, target)]
    if illegal:
        raise ValueError(f"{illegal} -> {target} is not in atp.states.TRANSITIONS")
    rows = Instance.objects.filter(pk=pk, status__in=sources)
    if attempt is not None:
        rows = rows.filter(attempt=attempt)
    if not rows.update(status=target, updated=Now(), **(changes or {})):
        raise refusal(pk, target, attempt=attempt)
    if attempt is None:
        attempt = Instance.objects.filter(pk=pk).values_list("attempt", flat=True).get()
    # The entry is dated by the row just changed, not by a second reading of the clock:
    # now() is the statement's time (PostgreSQL, MariaDB/MySQL, SQLite), and the next
    # statement's would put the history a little after the task's own times.
    at = Subquery(Instance.objects.filter(pk=pk).values(dated_by)[:1])
    write_history(pk, target, attempt, message, daemon, by=by, at=at)
    return attempt


def write_history(pk, status, attempt, message, daemon=None, *, by=None, at=None):
    """Add an entry to task ``pk``'s history; raise ``InvalidParameter`` for a message
    no database stores (the caller's transaction then rolls back)."""
    check_text(message, "a history message")
    LogRecord.objects.create(
        instance_id=pk, time=Now() if at is None else at, status=status, attempt=attempt, message=message,
        daemon=daemon_label(daemon), actor=actor_label(by),
    )


def refusal(pk, target, *, attempt=None):
    """Return the error that explains why task ``pk`` cannot move to ``target`` now.

    With ``target`` None it explains why a write that changes no state was refused.
    """
    row = Instance.objects.filter(pk=pk).values("status", "attempt").first()
    if row is None:
        return TaskNotFound(f"task #{pk} does not exist")
    current = row["status"]
    if attempt is not None and row["attempt"] != attempt:
        change = f"its change to {target}" if target else "its write"
        return AttemptSuperseded(
            f"task #{pk}: attempt {attempt} was superseded by attempt {row['attempt']}; "
            f"{change} is ignored",
            current=current, target=target,
        )
    return InvalidTransition(
        describe_refusal(current, target, task=f"#{pk}"), current=current, target=target
    )
