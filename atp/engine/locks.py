"""Locking a task's rows before deciding what to do with them.

A verb that decides from what it reads must read under lock, or a concurrent verb
can change the rows between the read and the write: under READ COMMITTED a
``DELETE ... WHERE daemon_id IS NULL`` does not see a lease that another transaction
gave up but has not committed, and acts on the old row.

The one order, in every transaction that locks more than one of them:

1. the daemon's registry row (a claim, a reaper declaring a daemon stopped);
2. the task types' rows (a claim of types with ``max_concurrency`` or ``rate``);
3. the task's queue row (``Task``);
4. the task (``Instance``);
5. a batch's row (a member's re-enqueue, after the member; the batch's completion,
   which locks no member and then only creates new rows: ``atp.engine.batches``);
6. tombstones (written by the purge holding the tasks it deletes).

A schedule's row is locked alone, before the enqueue of its run creates new rows.

A transaction takes a lock it needs before any lock later in the list, so two of
them meet on the earliest row they share and the second waits there: no deadlock,
and it decides on what the first committed. A ``Task`` row is only ever created by
a transaction that holds its ``Instance`` (enqueue creates both; a re-enqueue of an
ended task locks it first), so after locking the task a verb looks again for a
queue row it did not find.

SQLite has no row locks: the queue's transactions take the database's write lock at
``BEGIN IMMEDIATE`` (``atp.db``), which serialises them whole, and the reads below are
plain reads there.
"""

from dataclasses import dataclass

from django.db import connections

from atp.engine.base import database
from atp.exceptions import TaskNotFound
from atp.models import Instance, Task

TASK_FIELDS = ("status", "attempt", "restarts", "type_id", "identifier", "priority", "tag")
ROW_FIELDS = ("daemon_id", "paused_since")


@dataclass(frozen=True)
class Locked:
    """A task's rows as they are under lock, for as long as the transaction lasts."""

    pk: int
    status: str
    attempt: int
    restarts: int
    type_id: int
    identifier: str
    priority: int
    tag: str
    has_row: bool
    lease: int = None  # the daemon holding the queue row, if any
    paused_since: object = None

    @property
    def is_leased(self):
        return self.lease is not None

    @property
    def is_held(self):
        """Whether it waits, unleased, for an operator to resume it (see ``lifecycle.hold``)."""
        return self.has_row and self.lease is None and self.paused_since is not None


def for_update(queryset):
    """Return ``queryset`` locking its rows, as strongly as the change needs and no more."""
    features = connections[database()].features
    # NO KEY UPDATE lets rows referring to the task (its history) be inserted meanwhile.
    return queryset.select_for_update(no_key=features.has_select_for_no_key_update)


def lock_task(pk):
    """Lock task ``pk``'s queue row, then the task; return them as ``Locked``.

    Run inside a queue transaction. Raise ``TaskNotFound`` for a missing task.
    """
    row = _lock_row(pk)
    task = for_update(Instance.objects.filter(pk=pk)).values(*TASK_FIELDS).first()
    if task is None:
        raise TaskNotFound(f"task #{pk} does not exist")
    if row is None:
        row = _lock_row(pk)  # made by a transaction we waited for on the task
    if row is None:
        return Locked(pk, has_row=False, **task)
    return Locked(pk, has_row=True, lease=row["daemon_id"], paused_since=row["paused_since"],
                  **task)


def _lock_row(pk):
    # The plain form (FOR UPDATE) here: nothing refers to a queue row.
    return Task.objects.select_for_update().filter(instance_id=pk).values(*ROW_FIELDS).first()
