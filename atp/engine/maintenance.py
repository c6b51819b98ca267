"""Removing tasks: deleting one, and purging ended tasks past their retention."""

import datetime

from django.db import connections
from django.db.models import CASCADE, SET_NULL, Exists, OuterRef, Value
from django.db.models.functions import Now

from atp.conf import conf
from atp.db import database_now
from atp.engine.base import database, pk_of, queue_write
from atp.engine.lifecycle import expired
from atp.engine.locks import lock_task
from atp.engine.transitions import move
from atp.engine.types import find_type
from atp.exceptions import InvalidParameter, InvalidTransition
from atp.models import Instance, Task, Tombstone, Type
from atp.states import TERMINAL, Status

DELETABLE = (Status.ACCEPTED, *TERMINAL)
#: How many expired tasks one ``expire_waiting`` cancels at most.
EXPIRE_BATCH_SIZE = 500


def expire_waiting(limit=EXPIRE_BATCH_SIZE):
    """Cancel up to ``limit`` waiting tasks whose ``expires`` passed, the soonest expired
    first, each saying so in its history; return how many. No claim takes them already
    (the claim's filter): this ends them. A task a claim took before it expired runs; a
    held (paused) task waits for its resume."""
    pks = list(Task.objects.filter(expires__lte=Now(), daemon__isnull=True,
                                   paused_since__isnull=True)
               .order_by("expires").values_list("instance_id", flat=True)[:limit])
    return sum(_expire(pk) for pk in pks)


@queue_write
def _expire(pk):
    """Cancel task ``pk`` if it still waits, unclaimed, past its expiry; return whether it did."""
    locked = lock_task(pk)
    if not locked.has_row or locked.is_leased or locked.status != Status.ACCEPTED:
        return False  # gone, claimed before it expired, or held: not for the sweep
    expires = (Task.objects.filter(instance_id=pk, expires__lte=Now())
               .values_list("expires", flat=True).first())
    if expires is None:
        return False
    Task.objects.filter(instance_id=pk).delete()
    move(pk, Status.CANCELLED, sources={Status.ACCEPTED}, changes={"finished": Now()},
         message=expired(expires))
    return True


@queue_write
def delete_task(instance):
    """Delete a queued or ended task with its inputs, response and history.

    Raise ``InvalidTransition`` for a task in flight (cancel it first), or one whose
    last worker its daemon is still stopping, and ``TaskNotFound`` for a missing one;
    nothing is deleted then.
    """
    pk = pk_of(instance)
    locked = lock_task(pk)
    if locked.status not in DELETABLE:
        raise InvalidTransition(
            f"task #{pk} is {locked.status}: cancel it before deleting it", current=locked.status
        )
    if locked.is_leased:
        raise InvalidTransition(
            f"task #{pk} is {locked.status} but its daemon is still stopping its last "
            "worker: delete it in a moment", current=locked.status,
        )
    named = list(Instance.objects.filter(pk=pk, named=True).values_list(
        "type_id", "identifier", "named", "finished"))
    _bury(named)
    _delete_rows([pk])


@queue_write
def delete_ended(pks):
    """Delete the ended tasks among ``pks`` with all they hold; return the keys of those gone.

    Tasks not ended (or gone), and ended ones whose daemon is still stopping their
    worker, are left alone; use ``delete_task`` to hear why.
    """
    return _delete_locked(Instance.objects.filter(pk__in=list(pks)))


def _delete_locked(tasks, limit=None):
    """Delete the ended tasks of ``tasks`` off the queue that no verb holds (at most
    ``limit``, in the order of ``tasks``); return their keys.

    Each is locked first and skipped if another transaction holds it (one re-enqueueing
    it, say); a task with a queue row is left to the daemon or the claim that ends it.
    """
    ended = tasks.filter(status__in=TERMINAL).exclude(
        Exists(Task.objects.filter(instance=OuterRef("pk")))
    )
    if connections[database()].features.has_select_for_update_skip_locked:
        ended = ended.select_for_update(skip_locked=True)
    rows = list(ended.values_list("pk", "type_id", "identifier", "named", "finished")[:limit])
    if rows:
        _bury([row[1:] for row in rows if row[3]])
        _delete_rows([row[0] for row in rows])
    return [row[0] for row in rows]


#: Parameters a purge's statement binds at most (SQLite takes 32,766).
DELETE_CHUNK = 1000


def _delete_rows(pks):
    """Delete the tasks ``pks`` (locked, ended, off the queue) and all they hold, a
    statement a table: what Django's collector does for ``Instance.delete()``, from
    the same relations, without loading every task as a model and its keys as a filter
    (that was two thirds of a purge's time). Django's delete signals are not sent.
    Where a project's own model refers to tasks, the collector does it, as it would."""
    statements = _statements(_relations())
    connection = connections[database()]
    for begin in range(0, len(pks), DELETE_CHUNK):
        chunk = pks[begin:begin + DELETE_CHUNK]
        if statements is None:
            Instance.objects.filter(pk__in=chunk).delete()
            continue
        marks = ", ".join(["%s"] * len(chunk))
        with connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement.format(marks=marks), chunk)


def _statements(relations):
    """Return the statements (with ``{marks}`` for the keys) that delete tasks and what
    ``relations`` hold of them, or None when one of them is more than a statement can
    follow: a model outside atp, rows other rows refer to in turn, or an ``on_delete``
    other than CASCADE and SET_NULL (PROTECT, say): then Django's collector must."""
    quote = connections[database()].ops.quote_name
    statements = []
    for relation in relations:
        model = relation.related_model
        if model._meta.app_label != Instance._meta.app_label:
            return None
        table, column = quote(model._meta.db_table), quote(relation.field.column)
        if relation.on_delete is CASCADE and not _relations(model):
            statements.append(f"DELETE FROM {table} WHERE {column} IN ({{marks}})")
        elif relation.on_delete is SET_NULL:
            statements.append(f"UPDATE {table} SET {column} = NULL WHERE {column} IN ({{marks}})")
        else:
            return None
    statements.append(f"DELETE FROM {quote(Instance._meta.db_table)} "
                      f"WHERE {quote(Instance._meta.pk.column)} IN ({{marks}})")
    return statements


def _relations(model=Instance):
    """Return the relations of other models to ``model``, hidden ones too (a batch's
    on-complete task)."""
    return [field for field in model._meta.get_fields(include_hidden=True)
            if field.auto_created and not field.concrete and (field.one_to_many or field.one_to_one)]


def _bury(named):
    """Write a tombstone for each named task in ``named`` (``(type key, name, named,
    end)`` of ended tasks about to be deleted) whose name its type's ``dedup_window``
    still holds: the name stays taken. A name keeps one tombstone, with the latest end
    of its tasks."""
    if not named:
        return
    windows = dict(Type.objects.filter(pk__in={row[0] for row in named}, dedup_window__isnull=False)
                   .values_list("pk", "dedup_window"))
    now = database_now(database())
    latest = {}
    for type_id, name, _, ended in named:
        window = windows.get(type_id)
        if window is None or ended is None:
            continue
        if ended + window > now and ended > latest.get((type_id, name), ended - window):
            latest[(type_id, name)] = ended
    if not latest:
        return
    kept = {(stone.type_id, stone.identifier): stone for stone in Tombstone.objects.filter(
        type_id__in={type_id for type_id, _ in latest},
        identifier__in={name for _, name in latest})}
    later = []
    for key, ended in latest.items():
        stone = kept.get(key)
        if stone is not None and stone.ended < ended:
            stone.ended = ended
            later.append(stone)
    Tombstone.objects.bulk_update(later, ["ended"])
    # A tombstone another purge writes meanwhile for the same name stays as it wrote it.
    Tombstone.objects.bulk_create(
        [Tombstone(type_id=type_id, identifier=name, ended=ended)
         for (type_id, name), ended in latest.items() if (type_id, name) not in kept],
        ignore_conflicts=True)


def purge_tombstones(*, batch_size=None, max_batches=None):
    """Delete the tombstones whose type's ``dedup_window`` has closed; return how many.

    In transactions of at most ``batch_size`` (``ATP_PURGE_BATCH_SIZE``) each, at most
    ``max_batches`` of them.
    """
    batch_size = batch_size or conf.PURGE_BATCH_SIZE
    purged = batches = 0
    for type_id, window in Type.objects.values_list("pk", "dedup_window"):
        while max_batches is None or batches < max_batches:
            deleted = _purge_tombstone_batch(type_id, window, batch_size)
            purged += deleted
            batches += bool(deleted)
            if deleted < batch_size:
                break
    return purged


def _purge_tombstone_batch(type_id, window, batch_size):
    stale = Tombstone.objects.filter(type_id=type_id)
    if window is not None:  # a type without a window keeps no name taken
        stale = stale.filter(ended__lte=Now() - Value(window))
    deleted, _ = Tombstone.objects.filter(
        pk__in=list(stale.values_list("pk", flat=True)[:batch_size])).delete()
    return deleted


def purge_plan():
    """Return the keys of every type, in key order: the types a sweep of retention goes
    through (``purge_type_due``)."""
    return list(Type.objects.order_by("pk").values_list("pk", flat=True))


def purge_type_due(type_id, batch_size):
    """Delete one batch of type ``type_id``'s ended tasks past its ``retention`` and one of
    its tombstones past its ``dedup_window``, as the type is now, each batch in a
    transaction of its own; return how many rows went, and whether a batch was full
    (more is due: call it again). A type gone deletes nothing.

    The daemons' retention (``atp.daemon.retention``): it costs a query or two when
    nothing is due."""
    settings = Type.objects.filter(pk=type_id).values_list("retention", "dedup_window").first()
    if settings is None:
        return 0, False
    retention, window = settings
    deleted = [_purge_tombstone_batch(type_id, window, batch_size)]
    if retention is not None:
        deleted.append(_purge_batch(type_id, retention, batch_size))
    return sum(deleted), batch_size in deleted


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


def _purge_batch(type_id, age, batch_size):
    """Purge one batch of a type's ended tasks, through its engine; return how many went."""
    from atp.engine.engines import engine

    return len(engine().purge(type_id, age, batch_size))


def purge_in_transaction(type_id, age, limit):
    """The portable form of the engines' ``purge`` (``atp.engine.contract``): the oldest
    first, each locked as it is found (SKIP LOCKED, where the database has it), so that
    daemons purging at once take different tasks. Run it in a transaction."""
    expired = Instance.objects.filter(
        type_id=type_id, finished__lt=Now() - Value(age)).order_by("finished")
    return _delete_locked(expired, limit=limit)
