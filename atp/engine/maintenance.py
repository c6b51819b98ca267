"""Removing tasks: deleting one, and purging ended tasks past their retention."""

import datetime

from django.db import connections
from django.db.models import Value
from django.db.models.functions import Now

from atp.conf import conf
from atp.engine.base import database, pk_of, queue_write
from atp.engine.transitions import refusal
from atp.engine.types import find_type
from atp.exceptions import InvalidParameter, InvalidTransition
from atp.models import Instance, Task, Type
from atp.states import TERMINAL, Status

DELETABLE = (Status.ACCEPTED, *TERMINAL)


@queue_write
def delete_task(instance):
    """Delete a queued or ended task with its inputs, response and history.

    Raise ``InvalidTransition`` for a task in flight (cancel it first) and
    ``TaskNotFound`` for a missing one; nothing is deleted then.
    """
    pk = pk_of(instance)
    # The waiting queue row goes first, so a claim cannot take the task meanwhile.
    Task.objects.filter(instance_id=pk, daemon__isnull=True).delete()
    deleted, _ = Instance.objects.filter(pk=pk, status__in=DELETABLE).delete()
    if deleted:
        return
    error = refusal(pk, None)
    if isinstance(error, InvalidTransition):
        error = InvalidTransition(
            f"task #{pk} is {error.current}: cancel it before deleting it", current=error.current
        )
    raise error


@queue_write
def delete_ended(pks):
    """Delete the ended tasks among ``pks`` with all they hold; return how many went.

    Tasks not ended (or gone) are left alone; use ``delete_task`` to hear why.
    """
    deleted, per_model = Instance.objects.filter(pk__in=list(pks), status__in=TERMINAL).delete()
    return per_model.get(Instance._meta.label, 0)


def purge_finished(older_than=None, type=None, *, batch_size=None, max_batches=None):
    """Delete ended tasks (finished, failed, cancelled) with all they hold; return how many.

    With ``older_than`` (a timedelta or seconds) every task that ended longer ago is
    deleted; without it, only tasks past their type's ``retention`` (a type without
    retention keeps its tasks). ``type`` limits the purge to one type identifier.
    Each transaction deletes at most ``batch_size`` tasks (``ATP_PURGE_BATCH_SIZE``),
    so claims never wait long behind a purge; ``max_batches`` stops after that many
    transactions that deleted something (the daemon purges a little at each round).
    """
    batch_size = batch_size or conf.PURGE_BATCH_SIZE
    age = _clean_age(older_than)
    types = list(Type.objects.all()) if type is None else [find_type(type)]
    purged = batches = 0
    for task_type in types:
        type_age = age if age is not None else task_type.retention
        if type_age is None:
            continue
        while max_batches is None or batches < max_batches:
            deleted = _purge_batch(task_type.pk, type_age, batch_size)
            purged += deleted
            batches += bool(deleted)  # finding nothing costs a type no turn
            if deleted < batch_size:
                break
    return purged


def _clean_age(older_than):
    if older_than is None:
        return None
    if isinstance(older_than, (int, float)) and not isinstance(older_than, bool):
        older_than = datetime.timedelta(seconds=older_than)
    if not isinstance(older_than, datetime.timedelta) or older_than < datetime.timedelta(0):
        raise InvalidParameter(f"older_than must be a non-negative timedelta or seconds, not {older_than!r}")
    return older_than


@queue_write
def _purge_batch(type_id, age, batch_size):
    ended = Instance.objects.filter(
        type_id=type_id, status__in=TERMINAL, finished__lt=Now() - Value(age)
    ).order_by("finished")
    if connections[database()].features.has_select_for_update_skip_locked:
        # An operator re-enqueueing one of these locks it first; leave it alone.
        ended = ended.select_for_update(skip_locked=True)
    pks = list(ended.values_list("pk", flat=True)[:batch_size])
    if not pks:
        return 0
    _, per_model = Instance.objects.filter(pk__in=pks, status__in=TERMINAL).delete()
    return per_model.get(Instance._meta.label, 0)
