"""A verb applied to many tasks: each task through its queue verb, in batches, summed up.

The admin's actions and ``manage.py atp retry`` use it.

A selection may be "all 40,000 matching": its keys are read in batches of
``BATCH_SIZE``, and each task is changed in a transaction of its own, so one refusal
costs nothing to the others. The message says how many were changed and why the rest
were refused ("3 re-enqueued, 2 refused: already finished").
"""

import logging
from collections import Counter
from dataclasses import dataclass, field

from atp import audit
from atp.exceptions import InvalidTransition, TaskAlreadyExists, TaskNotFound
from atp.models import Instance
from atp.presentation import refusal_reason

logger = logging.getLogger(__name__)

BATCH_SIZE = 500


@dataclass
class Outcome:
    """How an action went: the tasks it changed, the refusals by reason, and how many
    failed with an unexpected error (logged)."""

    changed: list = field(default_factory=list)
    refused: Counter = field(default_factory=Counter)
    failed: int = 0

    @property
    def done(self):
        return len(self.changed)

    def message(self, done_label):
        parts = [f"{self.done} {done_label}"]
        parts += [f"{count} refused: {reason}" for reason, count in self.refused.most_common()]
        if self.failed:
            parts.append(f"{self.failed} failed (see the server log)")
        return ", ".join(parts)


def batches(queryset, size=None):
    """Yield the keys of the tasks in ``queryset``, ``size`` (``BATCH_SIZE``) at a time, in key order."""
    size = size or BATCH_SIZE
    keys = queryset.order_by("pk").values_list("pk", flat=True)
    last = None
    while True:
        batch = list((keys if last is None else keys.filter(pk__gt=last))[:size])
        if not batch:
            return
        yield batch
        last = batch[-1]


def apply_to_each(queryset, verb, user, done_label):
    """Apply ``verb(pk, by=user)`` to every selected task, and log it; return the ``Outcome``."""
    outcome = Outcome()
    for batch in batches(queryset):
        changed = []
        for pk in batch:
            try:
                verb(pk, by=user)
            except (InvalidTransition, TaskAlreadyExists, TaskNotFound) as exc:
                outcome.refused[refusal_reason(exc)] += 1
            except Exception:
                # One task's failure (the database gone, say) must not hide what was
                # already done to the others: report it with them and go on.
                logger.exception("%s of task #%s failed", getattr(verb, "__name__", verb), pk)
                outcome.failed += 1
            else:
                changed.append(pk)
        audit.record(user, Instance, audit.task_names(changed), done_label.capitalize())
        outcome.changed += changed
    return outcome


def delete_each_ended(queryset, delete_ended, user):
    """Delete the ended tasks of the selection in batches, and log it; return the ``Outcome``."""
    outcome = Outcome()
    for batch in batches(queryset):
        names = dict(audit.task_names(batch))
        deleted = delete_ended(batch)
        audit.record(user, Instance, [(pk, names[pk]) for pk in deleted], "Deleted",
                     deleted=True)
        outcome.changed += deleted
        if len(batch) > len(deleted):
            outcome.refused["not ended, or its worker is still being stopped"] += \
                len(batch) - len(deleted)
    return outcome
