"""Batches: tasks enqueued together, and one task enqueued once they have all ended.

    with atp.batch("reports.merge", inputs={"report": 42}) as batch:
        for part in parts:
            atp.enqueue("reports.part", {"part": part})

Every task enqueued inside the block (``enqueue``, ``enqueue_many``, ``defer``,
``enqueue_on_commit``) is a member. When the block ends the batch is sealed; once it is
sealed and none of its members is live (all FINISHED, FAILED or CANCELLED), a daemon
enqueues the on-complete task with the counts.

A block may run for hours: while it runs, a thread of its process advances the
batch's ``beats`` every heartbeat interval (``atp.liveness.Pulse``). The daemons seal
a batch whose block never ended only once they saw that counter stand still for
``ATP_UNSEALED_BATCH_SECONDS`` on their own clock: its process died in the block.

Exactly once, across daemons: every daemon looks for such batches (``complete_due``),
and completes each in a transaction that locks the batch's row, checks again that no
member lives and that it is not completed, enqueues the on-complete task and marks the
batch completed. The task is named ``atp:batch-<id>-complete``, a name ``enqueue``
refuses: no task of an enqueuer's can have taken it. A member re-enqueued by an
operator locks the batch's row too (``hold_open``, in its own transaction), so it is
either live when the completion looks (which then waits for it), or re-enqueued after
the batch completed (it runs; the batch does not complete again).
"""

import contextlib
import contextvars
import logging
import weakref

import django
from django.db import connections, transaction
from django.db.models import Count, Exists, F, OuterRef
from django.db.models.functions import Now

from atp import registry
from atp.conf import conf
from atp.db import database_now, run_once
from atp.engine.base import database, queue_write
from atp.engine.locks import for_update
from atp.engine.types import get_type
from atp.exceptions import AtpError, InvalidParameter, TaskAlreadyExists
from atp.liveness import Pulse
from atp.models import Batch, Instance
from atp.serialization import dump_json, load_json
from atp.states import LIVE, Status

logger = logging.getLogger(__name__)

_current = contextvars.ContextVar("atp_batch", default=None)


def current_batch_id(*, on_commit=False):
    """Return the key of the batch whose block is running here, or None. ``on_commit``:
    the caller enqueues its member once the transaction commits (the batch is then
    sealed after it)."""
    batch = _current.get()
    if batch is None:
        return None
    if on_commit:
        batch.members_on_commit = True
    return batch.pk


@contextlib.contextmanager
def batch(on_complete, *, inputs=None, name="", type=None):
    """Group the tasks enqueued inside the block; enqueue ``on_complete`` once all ended.

    ``on_complete`` is a task type identifier, or a module-level function (or its
    dotted path) called with the batch's summary as ``atp.defer`` would, in a task of
    type ``type`` (``atp.deferred`` by default). The on-complete task's inputs are
    ``{"batch": id, "name": name, "total": n, "finished": n, "failed": n,
    "cancelled": n, "inputs": inputs}``. Yields the ``Batch``. Raise
    ``TaskTypeNotFound``, ``InvalidHandler``, ``InvalidParameter`` or
    ``InputsNotSerializable`` before anything is written. Batches do not nest.
    """
    if _current.get() is not None:
        raise InvalidParameter("batches do not nest: this block is inside another batch")
    fields = _clean(on_complete, inputs, name, type)
    created = Batch.objects.create(created=database_now(database()), **fields)
    pulse = _pulse(created)
    token = _current.set(created)
    try:
        yield created
    finally:
        _current.reset(token)
        if pulse is not None:
            pulse.stop()
        _seal(created)


def _pulse(made):
    """Start showing the daemons that the block of the batch ``made`` still runs; return
    the ``Pulse``, or None when the batch was made in a transaction: the daemons see it
    only once that commits, when the block has ended (sealed with it, or at the commit)."""
    if connections[database()].in_atomic_block:
        return None
    return Pulse(lambda: _beat(made.pk), conf.HEARTBEAT_INTERVAL_SECONDS,
                 name=f"atp batch #{made.pk}").start()


def _beat(pk):
    run_once(lambda: Batch.objects.filter(pk=pk, sealed__isnull=True)
             .update(beats=F("beats") + 1), database())


def _seal(made):
    """Seal the batch ``made`` once its members are all enqueued: now, or, when the block
    called ``enqueue_on_commit`` in a transaction, once it commits, after the members
    enqueued then (on-commit callbacks run in order). Also when the block raised: what it enqueued is
    queued (unless the transaction rolls back, and the batch with it). A batch left
    unsealed (its process died in the block) is sealed by the daemons once its pulse
    stopped (``seal_forgotten``)."""
    connection = connections[database()]
    if connection.needs_rollback:
        return  # the transaction is lost, the batch with it: nothing to seal
    if not (connection.in_atomic_block and getattr(made, "members_on_commit", False)):
        Batch.objects.filter(pk=made.pk).update(sealed=Now())
        made.refresh_from_db(fields=["sealed"])
        return
    awaiting = _awaiting_commit(connection)

    def seal():
        awaiting.pop(made.pk, None)
        Batch.objects.filter(pk=made.pk, sealed__isnull=True).update(sealed=Now())

    options = {"robust": True} if django.VERSION >= (5, 0) else {}
    transaction.on_commit(seal, using=database(), **options)
    awaiting[made.pk] = seal


#: By connection, the batches whose block ended in the transaction open on it, each with
#: the on-commit callback that seals it.
_awaiting = weakref.WeakKeyDictionary()


def _awaiting_commit(connection):
    awaiting = _awaiting.setdefault(connection, {})
    # Those whose callback is gone with a rolled-back transaction (or savepoint) are moot.
    pending = {id(callback) for _, callback, _ in connection.run_on_commit}
    for pk in [pk for pk, callback in awaiting.items() if id(callback) not in pending]:
        del awaiting[pk]
    return awaiting


def sealing_if_it_fails(enqueue_member):
    """Return the on-commit callback ``enqueue_member`` (an ``enqueue_on_commit``), which,
    should it fail at a commit, first seals the batches whose seal was to come at that
    commit: Django skips the callbacks after a failed one, their seals among them. The
    members skipped were not enqueued; each batch completes with those that were."""
    connection = connections[database()]
    at_commit = connection.in_atomic_block  # else it runs in the call, and raises there

    def callback():
        try:
            enqueue_member()
        except Exception:
            if at_commit:
                _seal_skipped(connection)
            raise

    return callback


def _seal_skipped(connection):
    awaiting = _awaiting.pop(connection, {})
    try:
        Batch.objects.filter(pk__in=list(awaiting), sealed__isnull=True).update(sealed=Now())
    except Exception:  # the database is gone: the member's error is the one raised
        logger.exception("batches %s, waiting for this commit, could not be sealed",
                         ", ".join(f"#{pk}" for pk in awaiting))


def open_batches(limit=1000):
    """Return ``{key: beats}`` of the batches not sealed yet (their block runs, or its
    process died in it), the oldest first, at most ``limit``."""
    return dict(Batch.objects.filter(sealed__isnull=True).order_by("pk")
                .values_list("pk", "beats")[:limit])


def seal_forgotten(silent):
    """Seal the batches ``silent`` (``{key: beats}``: their block's pulse was seen to stand
    still at that count for ``ATP_UNSEALED_BATCH_SECONDS``; see ``atp.liveness``) unless
    it moved since; return how many."""
    sealed = [pk for pk, beats in silent.items()
              if Batch.objects.filter(pk=pk, sealed__isnull=True, beats=beats).update(sealed=Now())]
    if sealed:
        logger.warning("sealed %s batch(es) whose block never ended (its process fell silent): %s",
                       len(sealed), ", ".join(f"#{pk}" for pk in sealed))
    return len(sealed)


def purge_completed(batch_size=1000):
    """Delete completed batches with neither a member nor their on-complete task left
    (retention purged them); return how many."""
    gone = (Batch.objects.filter(completed__isnull=False, completion__isnull=True)
            .exclude(Exists(Instance.objects.filter(batch=OuterRef("pk")))))
    deleted, _ = Batch.objects.filter(
        pk__in=list(gone.values_list("pk", flat=True)[:batch_size])).delete()
    return deleted


@contextlib.contextmanager
def member_of(batch_id):
    """Run the block as inside the batch ``batch_id`` (an ``enqueue_on_commit`` queued
    in a batch enqueues at the commit, when the block may be over)."""
    token = _current.set(None if batch_id is None else Batch(pk=batch_id))
    try:
        yield
    finally:
        _current.reset(token)


def _clean(on_complete, inputs, name, type):
    if not isinstance(name, str) or len(name) > 255:
        raise InvalidParameter(f"a batch name is a string of at most 255 characters, not {name!r}")
    data = dump_json(inputs)
    if callable(on_complete) or (isinstance(on_complete, str) and type is not None):
        from atp.deferred import DEFERRED_TYPE, RUNNER, resolve

        path = on_complete if isinstance(on_complete, str) else registry.handler_path(on_complete)
        resolve(path)
        task_type = get_type(type or DEFERRED_TYPE)
        if task_type.handler != RUNNER:
            raise InvalidParameter(
                f"task type {task_type.identifier!r} does not run deferred calls (its handler "
                f"is {task_type.handler}); give a type whose handler is {RUNNER!r}")
        return {"on_complete": task_type.identifier, "function": path, "inputs": data,
                "name": name}
    if not isinstance(on_complete, str):
        raise InvalidParameter(
            f"on_complete is a task type identifier or a function, not {on_complete!r}")
    return {"on_complete": get_type(on_complete).identifier, "inputs": data, "name": name}


def hold_open(batch_id):
    """Lock batch ``batch_id``'s row until the transaction ends (a member is re-enqueued):
    its completion waits, then sees the member live again. Return whether the batch
    is still open (not completed)."""
    # NO KEY UPDATE where there is one: enqueues into the batch (a member's foreign
    # key) do not wait for it.
    return for_update(Batch.objects.filter(pk=batch_id, completed__isnull=True)).exists()


def complete_due(limit=100):
    """Enqueue the on-complete task of each sealed batch whose members all ended, once
    across daemons; return the keys of the batches completed here."""
    done = []
    for pk in list(_due().values_list("pk", flat=True)[:limit]):
        try:
            if _complete(pk):
                done.append(pk)
        except AtpError as exc:  # its type went away, its queue is full...: next round
            logger.error("batch #%s could not complete: %s", pk, exc)
    return done


def _due():
    live = Instance.objects.filter(batch=OuterRef("pk"), status__in=LIVE)
    return (Batch.objects.filter(completed__isnull=True, sealed__isnull=False)
            .exclude(Exists(live)).order_by("pk"))


@queue_write
def _complete(pk):
    # The row lock serialises daemons completing the same batch, and re-enqueues of
    # its members (``hold_open``); what is read after it is what they committed.
    locked = for_update(Batch.objects.filter(pk=pk, completed__isnull=True)).first()
    if locked is None:
        return False  # another daemon completed it
    if Instance.objects.filter(batch=pk, status__in=LIVE).exists():
        return False  # a member was re-enqueued meanwhile
    counts = dict(Instance.objects.filter(batch=pk).values_list("status")
                  .annotate(count=Count("pk")).values_list("status", "count"))
    summary = {
        "batch": pk, "name": locked.name, "total": sum(counts.values()),
        "finished": counts.get(Status.FINISHED, 0), "failed": counts.get(Status.FAILED, 0),
        "cancelled": counts.get(Status.CANCELLED, 0), "inputs": load_json(locked.inputs),
    }
    from atp.engine.enqueue import enqueue, enqueue_reserved

    if locked.function:
        inputs = {"function": locked.function, "args": [summary], "kwargs": {}}
    else:
        inputs = summary
    try:
        completion = enqueue_reserved(locked.on_complete, inputs, completion_name(pk))
    except TaskAlreadyExists:
        # Not this batch's (the row lock is held, and it is not completed): a batch of the
        # same number before the table was emptied. The row lock is the guard; the name
        # only says whose the task is.
        logger.warning("batch #%s: the name %s is taken (batch numbers started again?); its "
                       "on-complete task gets a name of its own", pk, completion_name(pk))
        completion = enqueue(locked.on_complete, inputs)
    Batch.objects.filter(pk=pk).update(
        completed=Now(), completion=completion, total=summary["total"],
        finished=summary["finished"], failed=summary["failed"],
        cancelled=summary["cancelled"])
    return True


def completion_name(pk):
    """Return the name of the on-complete task of batch ``pk``."""
    return f"atp:batch-{pk}-complete"


def progress(batches):
    """Return ``{batch key: {status: count}}`` of the members of ``batches`` (keys)."""
    found = {}
    for pk, status, count in (Instance.objects.filter(batch__in=list(batches))
                              .values_list("batch", "status").annotate(count=Count("pk"))
                              .values_list("batch", "status", "count")):
        found.setdefault(pk, {})[status] = count
    return found
