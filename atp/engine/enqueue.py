"""Putting tasks in the queue.

An enqueue writes the task (``Instance``), its ``Inputs``, its queue row (``Task``)
and its first ``LogRecord`` in one transaction, or in a savepoint of the caller's:
when the caller rolls back, nothing of the task remains. ``enqueue_many`` writes any
number of tasks with one statement per table (inputs above a megabyte in all, several).
"""

import copy
import datetime
import re
import uuid

from django.conf import settings
from django.db import IntegrityError, connections, transaction
from django.db.models import Max
from django.db.models.base import ModelState
from django.utils import timezone

from atp import telemetry
from atp.conf import conf
from atp.db import database_now, take_write_lock
from atp.engine.base import database, queue_write
from atp.engine.batches import current_batch_id, member_of, sealing_if_it_fails
from atp.engine.databases import database_of
from atp.engine.engines import engine
from atp.engine.locks import for_update, lock_task
from atp.engine.notify import notify_runnable
from atp.engine.pull import clean_tag
from atp.engine.semaphores import (
    clean_holds,
    due_at,
    key_of,
    make_semaphores,
    turns,
    write_holds,
)
from atp.engine.transitions import write_history
from atp.engine.types import get_type
from atp.exceptions import (
    InputsTooLarge,
    InvalidParameter,
    QueueFull,
    TaskAlreadyExists,
    TaskTypeNotFound,
)
from atp.models import NAME_MAX_LENGTH, Inputs, Instance, LogRecord, Task, Tombstone, Type
from atp.registry import DURATION_MAX
from atp.serialization import InputFormat, check_pickle_enabled, dump_inputs
from atp.states import TERMINAL, Status

PRIORITY_MIN, PRIORITY_MAX = -32768, 32767
#: The most input data one INSERT carries (more only for one input alone): MariaDB and
#: MySQL refuse a statement longer than their ``max_allowed_packet`` (16 MB by default
#: on MariaDB), and a string literal escaped can take twice the bytes of its text.
INPUTS_BYTES_PER_INSERT = 1024 * 1024


#: What a named enqueue does when a live task of its type has its name (``on_conflict``).
ON_CONFLICT = ("raise", "keep", "replace")


def enqueue(type_identifier, inputs=None, *, identifier=None, priority=0, eta=None,
            countdown=None, tag=None, expires=None, on_conflict="raise", hold=None, key=None):
    """Queue a task of type ``type_identifier`` with ``inputs``; return its ``Instance``.

    ``identifier`` names the task (letters, digits, ``_`` and ``-``, at most 500; a
    random one by default). A name is unique among the live tasks of its type, and
    stays taken for the type's ``dedup_window`` after its task ended (9 days by
    default), even once the task is purged. Higher ``priority`` runs first. ``eta``
    (an aware datetime) or ``countdown`` (seconds or a timedelta) delays the start.
    ``tag`` (text, at most 500 characters) is what pull consumers lease related tasks
    together by (``lease_tasks``). ``expires`` (an aware datetime, or seconds or a
    timedelta from now) is when the task is cancelled if no attempt has started by then:
    none starts after it (``expire_waiting``).

    ``on_conflict`` says what a named enqueue does when a live task of the type has the
    name: ``"raise"`` ``TaskAlreadyExists`` (the default); ``"keep"`` that task, returned
    as it is; ``"replace"`` the inputs of that task, waiting, with these, and its due
    time with this one (``eta``, ``countdown``: debounce), returned so; a task already
    claimed or running is never replaced: ``TaskAlreadyExists`` says so.

    ``hold`` names the semaphores the task needs (``atp.set_semaphore``; a mutex unless
    set otherwise), ``key`` its type's semaphore of that key (the type's
    ``key_concurrency`` is its limit): it starts only with a slot of each, all taken at
    once (``atp.engine.semaphores``). Raise
    ``TaskTypeNotFound``, ``InputsNotSerializable``, ``InvalidParameter`` or
    ``TaskAlreadyExists``; nothing is written then.
    """
    named = identifier is not None
    identifier = _clean_identifier(identifier)
    priority = _clean_priority(priority)
    schedule = _schedule(eta, countdown)
    expires = _expiry(expires, schedule)
    tag = clean_tag(tag)
    holds = _holds(hold, key)
    if _clean_on_conflict(on_conflict, named) != "raise":
        return _enqueue_or_meet(type_identifier, identifier, inputs, priority, schedule, tag,
                                expires, on_conflict, holds)
    return _enqueue(type_identifier, [(identifier, inputs)], priority, schedule, named=named,
                    tag=tag, expires=expires, holds=holds)[0]


def enqueue_on_commit(type_identifier, inputs=None, *, identifier=None, priority=0, eta=None,
                      countdown=None, expires=None, on_conflict="raise", hold=None, key=None):
    """Queue a task as ``enqueue`` does, but only once the surrounding transaction commits
    (at once outside one); return None, as the task does not exist yet.

    Everything that can be checked before is checked now: an unknown type, inputs that
    cannot be stored, a bad argument raise here and nothing is queued. What can only
    fail at the commit (the ``identifier`` taken: ``TaskAlreadyExists``;
    a full queue: ``QueueFull``; the type unregistered meanwhile; the database gone)
    raises from the commit, after the surrounding transaction committed, and Django
    skips the callbacks after this one (a batch's seal is done all the same). The inputs
    are copied at the call. A ``countdown`` (and ``expires`` in seconds) counts from the
    commit.
    """
    identifier = None if identifier is None else _clean_identifier(identifier)
    _clean_priority(priority)
    _expiry(expires, _schedule(eta, countdown))
    _clean_on_conflict(on_conflict, identifier is not None)
    task_type = get_type(type_identifier)
    _dump(inputs, task_type)
    if _holds(hold, key) is not None:
        clean_holds(hold, key, task_type)
    inputs = copy.deepcopy(inputs)  # as they are now, not as the caller may change them
    batch_id = current_batch_id(on_commit=True)  # a member of the batch whose block runs now

    def enqueue_now():
        with member_of(batch_id):
            enqueue(type_identifier, inputs, identifier=identifier, priority=priority,
                    eta=eta, countdown=countdown, expires=expires, on_conflict=on_conflict,
                    hold=hold, key=key)

    transaction.on_commit(sealing_if_it_fails(enqueue_now), using=database())


def enqueue_reserved(type_identifier, inputs, name):
    """Queue a task named ``name``, one of atp's own (``atp:...``), which ``enqueue`` refuses."""
    return _enqueue(type_identifier, [(name, inputs)], 0, datetime.timedelta(0), named=True)[0]


def enqueue_many(type_identifier, inputs_list, *, priority=0, eta=None, countdown=None,
                 tag=None, expires=None, hold=None, key=None):
    """Queue one task of type ``type_identifier`` per item of ``inputs_list``; return them.

    All tasks are written together or not at all, with generated identifiers (and
    ``tag``, ``expires``, ``hold`` and ``key``, if given, each). Raise as ``enqueue`` does.
    """
    priority = _clean_priority(priority)
    schedule = _schedule(eta, countdown)
    expires = _expiry(expires, schedule)
    tag = clean_tag(tag)
    entries = [(uuid.uuid4().hex, inputs) for inputs in inputs_list]
    if not entries:
        get_type(type_identifier)  # an unknown type is still refused
        return []
    return _enqueue(type_identifier, entries, priority, schedule, tag=tag, expires=expires,
                    holds=_holds(hold, key))


def _holds(hold, key):
    """Return what ``enqueue`` was given of semaphores (checked with the type, by
    ``insert_tasks``), or None."""
    return None if hold is None and key is None else (hold, key)


def _enqueue(type_identifier, entries, priority, schedule, named=False, tag=None, expires=None,
             holds=None):
    """Write ``entries`` (``(identifier, inputs)``) as tasks; return their ``Instance`` objects.
    ``named``: the identifiers were given (one entry), not drawn."""
    key = type_identifier.identifier if isinstance(type_identifier, Type) else type_identifier
    with telemetry.sending(key, len(entries)) as written:
        instances = _enqueue_as(key, type_identifier, entries, priority, schedule, named, tag,
                                expires, holds)
        written(instances)
    return instances


def _enqueue_as(key, type_identifier, entries, priority, schedule, named, tag, expires, holds):
    take_write_lock(database())  # before the type is read in the caller's transaction
    if named:  # the type's window as it is now, not as a Type object given was read
        type_identifier = key
    writer = engine()
    # Every enqueue counts the queue; or the task expires, or holds semaphores, which the
    # engines' statements do not write: the portable form serves.
    if conf.MAX_QUEUED_TOTAL is not None or expires is not None or holds is not None:
        task_type = get_type(type_identifier)
        encoded = [(identifier, _dump(inputs, task_type)) for identifier, inputs in entries]
        return insert_tasks(task_type, encoded, priority, schedule, named, tag, expires=expires,
                            holds=holds)
    for attempt in range(3):
        # A type read before serves only an engine that checks it is still as read.
        task_type = _types.get(key) if attempt == 0 and writer.checks_type_as_read else None
        fresh = task_type is None
        if fresh:
            task_type = _types[key] = get_type(type_identifier)
        try:
            encoded = [(identifier, _dump(inputs, task_type)) for identifier, inputs in entries]
        except InputsTooLarge:
            if fresh:
                raise
            continue  # its limit may have grown since it was read
        if named and task_type.dedup_window:
            # The window as it is now (the engine's statement refuses a named task of a
            # type that got one since it was read).
            task_type = _types[key] = get_type(key)
            if task_type.dedup_window:
                encoded = [(identifier, _dump(inputs, task_type)) for identifier, inputs in entries]
                return insert_tasks(task_type, encoded, priority, schedule, named, tag)
        if task_type.max_queued is not None:
            task_type = _types[key] = get_type(key)  # as it is now: the limit may be gone
            if task_type.max_queued is not None:
                encoded = [(identifier, _dump(inputs, task_type)) for identifier, inputs in entries]
                return insert_tasks(task_type, encoded, priority, schedule, named, tag)
        instances = _write(writer, task_type, encoded, priority, schedule, named, tag)
        if instances is not None:
            return instances
        _types.pop(key, None)
    raise TaskTypeNotFound(f"task type {key!r} keeps changing; try again")


#: The types enqueues wrote to with an engine, by identifier. A stale entry costs one
#: more round trip: the engine checks in its transaction that the type still is as read.
_types = {}


def _write(writer, task_type, encoded, priority, schedule, named=False, tag=None):
    """Write the tasks with the engine ``writer``; return them, or None when
    ``task_type`` changed since it was read."""
    if isinstance(schedule, datetime.datetime):
        notify = schedule <= timezone.now()
    else:
        notify = not schedule
    notify = notify and not task_type.pull  # no daemon claims a pull type's tasks
    try:
        if len(encoded) == 1:
            [(identifier, data)] = encoded
            instance = Instance(type=task_type, identifier=identifier, priority=priority,
                                named=named, batch_id=current_batch_id(), tag=tag)
            size = len(data.encode("utf-8"))
            rows = writer.enqueue(task_type, instance, data, schedule, size, notify)
            rows = None if rows is None else [(rows[0], identifier, rows[1])]
        else:
            identifiers, data = [list(column) for column in zip(*encoded, strict=True)]
            rows = writer.enqueue_many(task_type, identifiers, data, priority, schedule, notify,
                                       tag=tag, named=named)
    except IntegrityError:
        raise _duplicate(task_type, encoded) from None
    if rows is None:
        return None
    keys = {identifier: (pk, created) for pk, identifier, created in rows}
    shared = copy.copy(task_type)  # the cached one stays the cache's
    template = Instance(type=shared, identifier="", priority=priority, named=named,
                        batch_id=current_batch_id(), tag=tag)
    alias = database()
    return [_as_stored(template, identifier, *keys[identifier], alias)
            for identifier, _ in encoded]


def _as_stored(template, identifier, pk, created, alias):
    """Return a copy of the unsaved ``template`` as the database stored it, with its own
    state: what ``Model.__init__`` would build, at a tenth of its cost (an ``enqueue_many``
    of 1,000 tasks spent a quarter of its time there)."""
    instance = Instance.__new__(Instance)
    instance.__dict__.update(template.__dict__)
    state = instance._state = ModelState()
    state.adding, state.db = False, alias
    state.fields_cache = dict(template._state.fields_cache)  # its type
    instance.identifier, instance.pk, instance.created, instance.updated = (
        identifier, pk, created, created)
    return instance


@queue_write
def _enqueue_or_meet(type_identifier, identifier, inputs, priority, schedule, tag, expires,
                     on_conflict, holds):
    """Enqueue the task named ``identifier``, or, when a live task of its type has the
    name, keep or replace that one (``on_conflict``); return the task."""
    for _ in range(3):
        task_type = get_type(type_identifier)
        # The queue row first (atp.engine.locks): a claim of it waits, or is waited for.
        met = for_update(Task.objects.filter(type=task_type, identifier=identifier)).values_list(
            "instance_id", "daemon_id").first()
        if met is not None:
            return _meet(task_type, *met, inputs, schedule, expires, on_conflict)
        try:
            with transaction.atomic(using=database()):
                return _enqueue(task_type, [(identifier, inputs)], priority, schedule, named=True,
                                tag=tag, expires=expires, holds=holds)[0]
        except TaskAlreadyExists:
            # Enqueued by another transaction since the look (the insert waited for it to
            # commit), or taken by a task that ended within the dedup window: look again.
            if not Task.objects.filter(type=task_type, identifier=identifier).exists():
                raise
    raise TaskAlreadyExists(f"the name {identifier!r} of type {task_type.identifier!r} keeps "
                            "changing hands; try again")


def _meet(task_type, pk, lease, inputs, schedule, expires, on_conflict):
    """Keep or replace the live task ``pk`` (its queue row locked, held by ``lease``)."""
    locked = lock_task(pk)
    if on_conflict == "replace":
        if lease is not None or locked.status != Status.ACCEPTED:
            raise TaskAlreadyExists(
                f"task #{pk} of type {task_type.identifier!r} has the name "
                f"{locked.identifier!r} and is {locked.status}{' (claimed)' if lease else ''}: "
                "only a waiting task is replaced")
        _replace(task_type, locked, inputs, schedule, expires)
    return Instance.objects.select_related("type").get(pk=pk)


def _replace(task_type, locked, inputs, schedule, expires):
    """Give the waiting task ``locked`` the inputs and due time of a later enqueue."""
    pk = locked.pk
    data = _dump(inputs, task_type)
    now = database_now(database())
    not_before = schedule if isinstance(schedule, datetime.datetime) else now + schedule
    row = due_at(not_before)
    if expires is not None:
        row["expires"] = expires if isinstance(expires, datetime.datetime) else now + expires
        Instance.objects.filter(pk=pk).update(expires=row["expires"])
    # The expiry given, or the one it keeps, must still come after its new due time.
    until = row.get("expires") or Task.objects.filter(instance_id=pk).values_list(
        "expires", flat=True).get()
    if until is not None and until <= max(now, not_before):
        raise InvalidParameter(
            f"the task would expire ({until.isoformat(timespec='milliseconds')}) before it "
            f"could start ({max(now, not_before).isoformat(timespec='milliseconds')})")
    Task.objects.filter(instance_id=pk).update(**row)
    Inputs.objects.update_or_create(instance_id=pk, defaults={
        "input_format": task_type.input_format, "data": data})
    Instance.objects.filter(pk=pk).update(updated=now)
    due = ("now" if not_before <= now else
           f"due at {not_before.isoformat(timespec='milliseconds')}, in "
           f"{(not_before - now).total_seconds():g} s")
    write_history(pk, None, locked.attempt, f"replaced by a later enqueue of its name: its "
                  f"inputs, and its due time ({due})")
    if not_before <= now and not task_type.pull:
        notify_runnable()


def _check_name_free(task_type, instance, now):
    """Raise ``TaskAlreadyExists`` when ``instance``'s name was used by a task of its type
    that ended within the type's ``dedup_window`` (kept or purged).

    Read after the new queue row holds the name among the live tasks: a task of that
    name ending meanwhile made this insert wait for it, and is seen ended here; a purge
    deleting one wrote its tombstone in the same transaction.
    """
    since = now - task_type.dedup_window
    name = instance.identifier
    ended = max(filter(None, [
        Instance.objects.filter(type=task_type, identifier=name, named=True,
                                status__in=TERMINAL, finished__gt=since).exclude(pk=instance.pk)
        .aggregate(last=Max("finished"))["last"],
        Tombstone.objects.filter(type=task_type, identifier=name, ended__gt=since)
        .values_list("ended", flat=True).first(),
    ]), default=None)
    if ended is not None:
        raise TaskAlreadyExists(
            f"the name {name!r} of type {task_type.identifier!r} was used by a task that ended "
            f"at {ended.isoformat(timespec='seconds')}: it stays taken until "
            f"{(ended + task_type.dedup_window).isoformat(timespec='seconds')} (dedup_window "
            f"{task_type.dedup_window})")


def _duplicate(task_type, encoded):
    taken = repr(encoded[0][0]) if len(encoded) == 1 else "one of these identifiers"
    return TaskAlreadyExists(f"a live task of type {task_type.identifier!r} already has {taken}")


#: The advisory lock (PostgreSQL) serialising the enqueues that count the queue:
#: ``(DEPTH_LOCK, type id)`` for a type's ``max_queued``, ``(DEPTH_LOCK, 0)`` for all.
DEPTH_LOCK = 0x61747071  # "atpq"


def _check_depth(task_type, count):
    """Raise ``QueueFull`` unless the queue has room for ``count`` more tasks of
    ``task_type`` (its ``max_queued``, ``ATP_MAX_QUEUED_TOTAL``); nothing to do without
    either. Counted under a lock that serialises the counting enqueues (of the type, or
    of all types with ``ATP_MAX_QUEUED_TOTAL``) until the transaction ends: SQLite
    serialises every writer anyway; elsewhere the type's row is locked (the total is
    then approximate)."""
    total, most = conf.MAX_QUEUED_TOTAL, task_type.max_queued
    if total is None and most is None:
        return
    connection = connections[database()]
    with connection.cursor() as cursor:
        locked = database_of(connection).lock_counting(
            cursor, (DEPTH_LOCK, 0 if total is not None else task_type.pk))
    if not locked and most is not None:
        list(for_update(Type.objects.filter(pk=task_type.pk)).values_list("pk"))
    if most is not None:
        depth = Task.objects.filter(type=task_type).count()
        if depth + count > most:
            raise QueueFull(
                f"the queue of task type {task_type.identifier!r} holds {depth:,} tasks and "
                f"takes at most {most:,} (max_queued): {count:,} more do not fit")
    if total is not None:
        depth = Task.objects.count()
        if depth + count > total:
            raise QueueFull(
                f"the queue holds {depth:,} tasks and takes at most {total:,} "
                f"(ATP_MAX_QUEUED_TOTAL): {count:,} more do not fit")


@queue_write
def insert_tasks(task_type, entries, priority, schedule, named=False, tag=None, expires=None,
                 holds=None):
    """Write ``entries`` (``(identifier, encoded inputs)``) as tasks of ``task_type`` with
    the ORM; return their ``Instance`` objects. The portable form every engine uses for
    an enqueue that counts the queue, checks a name's ``dedup_window``, expires
    (``expires``: an aware datetime, or a delay from now) or holds semaphores (``holds``:
    ``enqueue``'s ``hold`` and ``key``), and the ``orm`` engine's for every enqueue."""
    holds = None if holds is None else clean_holds(*holds, task_type) or None
    now = database_now(database())
    not_before = schedule if isinstance(schedule, datetime.datetime) else now + schedule
    if isinstance(expires, datetime.timedelta):
        expires = now + expires
    if expires is not None and expires <= max(now, not_before):
        raise InvalidParameter(
            f"the task would expire ({expires.isoformat(timespec='milliseconds')}) before it "
            f"could start ({max(now, not_before).isoformat(timespec='milliseconds')})")
    _check_depth(task_type, len(entries))
    key, turns_of = None, [None] * len(entries)
    if holds is not None:
        semaphores = make_semaphores(holds)
        key = key_of(holds, semaphores)
        turns_of = turns(key, priority, not_before, now, len(entries))
    instances = Instance.objects.bulk_create(
        Instance(type=task_type, identifier=identifier, priority=priority, created=now,
                 updated=now, named=named, batch_id=current_batch_id(), tag=tag,
                 expires=expires)
        for identifier, _ in entries
    )
    _fill_primary_keys(task_type, instances)
    try:
        Task.objects.bulk_create(
            Task(instance=instance, type=task_type, identifier=instance.identifier,
                 priority=priority, enqueued=now, not_before=not_before, tag=tag,
                 expires=expires, gated=holds is not None, turn=turn, key_id=key)
            for instance, turn in zip(instances, turns_of, strict=True)
        )
    except IntegrityError:
        raise _duplicate(task_type, entries) from None
    if named and task_type.dedup_window:
        [instance] = instances
        _check_name_free(task_type, instance, now)
    if holds is not None:
        write_holds(task_type, instances, holds, semaphores)
    Inputs.objects.bulk_create(
        (Inputs(instance=instance, input_format=task_type.input_format, data=data)
         for instance, (_, data) in zip(instances, entries, strict=True)),
        batch_size=_inputs_per_insert(entries),
    )
    LogRecord.objects.bulk_create(
        LogRecord(instance=instance, time=now, status=Status.ACCEPTED, message="enqueued")
        for instance in instances
    )
    if not_before <= now and not task_type.pull:  # no daemon claims a pull type's tasks
        notify_runnable()
    return instances


def _inputs_per_insert(entries):
    """Return how many of ``entries``' inputs one INSERT carries (``INPUTS_BYTES_PER_INSERT``)."""
    # Characters, not bytes: encoding every input to count it would cost more than the
    # statements it saves; a character takes at most 4 bytes, well within the limits.
    largest = max((len(data) for _, data in entries), default=0)
    return max(1, INPUTS_BYTES_PER_INSERT // max(largest, 1))


def _fill_primary_keys(task_type, instances):
    # PostgreSQL and SQLite return the new keys; a database that cannot (MySQL) has
    # them looked up by the identifiers just written, which are unique in the batch.
    if all(instance.pk is not None for instance in instances):
        return
    keys = dict(
        Instance.objects.filter(
            type=task_type, status=Status.ACCEPTED,
            identifier__in=[instance.identifier for instance in instances],
        ).order_by("pk").values_list("identifier", "pk")
    )
    for instance in instances:
        instance.pk = keys[instance.identifier]


def _dump(inputs, task_type):
    """Return ``inputs`` encoded for ``task_type``; raise ``InputsNotSerializable``,
    ``InputsTooLarge``, or ``InvalidParameter`` for a pickle type while pickle is off."""
    if task_type.input_format == InputFormat.PICKLE:
        check_pickle_enabled()
    data = dump_inputs(inputs, task_type.input_format)
    size, limit = len(data.encode("utf-8")), task_type.input_limit
    if size > limit:
        raise InputsTooLarge(
            f"the inputs are {size:,} bytes as stored, and tasks of type "
            f"{task_type.identifier!r} take at most {limit:,} bytes (max_input_bytes, "
            "ATP_MAX_INPUT_BYTES): pass a reference to the data (a file, a row) instead"
        )
    return data


def check_inputs(inputs, task_type):
    """Raise what ``enqueue`` raises for ``inputs`` a task of ``task_type`` cannot take
    (``InputsNotSerializable``, ``InputsTooLarge``, ``InvalidParameter``)."""
    _dump(inputs, task_type)


#: A task's name: App Engine's.
NAME = re.compile(r"[A-Za-z0-9_-]+")


def _clean_identifier(identifier):
    if identifier is None:
        return uuid.uuid4().hex
    if not isinstance(identifier, str) or not identifier:
        raise InvalidParameter(f"a task identifier must be a non-empty string, not {identifier!r}")
    if len(identifier) > NAME_MAX_LENGTH:
        raise InvalidParameter(f"a task identifier has at most {NAME_MAX_LENGTH} characters")
    if not NAME.fullmatch(identifier):
        raise InvalidParameter(
            f"a task identifier has only letters, digits, '_' and '-', not {identifier!r}")
    return identifier


def _clean_priority(priority):
    if isinstance(priority, bool) or not isinstance(priority, int) or not (
        PRIORITY_MIN <= priority <= PRIORITY_MAX
    ):
        raise InvalidParameter(
            f"priority must be an integer from {PRIORITY_MIN} to {PRIORITY_MAX}, not {priority!r}"
        )
    return priority


def _expiry(expires, schedule):
    """Return when a task expires (``expires``: None, an aware datetime, or seconds or a
    timedelta from now), as given: a datetime, or a delay from now; raise
    ``InvalidParameter`` for one that cannot come after the task is due (``schedule``,
    ``_schedule``'s)."""
    if expires is None:
        return None
    if isinstance(expires, datetime.datetime):
        if settings.USE_TZ and timezone.is_naive(expires):
            raise InvalidParameter("expires must be timezone-aware")
        if isinstance(schedule, datetime.datetime) and expires <= schedule:
            raise InvalidParameter(f"expires ({expires.isoformat()}) must come after the "
                                   f"task's eta ({schedule.isoformat()})")
        return expires
    given = expires
    if isinstance(expires, (int, float)) and not isinstance(expires, bool):
        try:
            expires = datetime.timedelta(seconds=expires)
        except (OverflowError, ValueError):  # infinite, not a number, or huge
            expires = None
    if (not isinstance(expires, datetime.timedelta)
            or not datetime.timedelta(0) < expires <= DURATION_MAX):
        raise InvalidParameter(
            f"expires must be an aware datetime, or a number of seconds (or a timedelta) "
            f"above 0 and up to {DURATION_MAX.days} days, not {given!r}")
    if isinstance(schedule, datetime.timedelta) and expires <= schedule:
        raise InvalidParameter(f"expires (in {expires.total_seconds():g} s) must come after "
                               f"the task's countdown ({schedule.total_seconds():g} s)")
    return expires


def _clean_on_conflict(on_conflict, named):
    if on_conflict not in ON_CONFLICT:
        raise InvalidParameter(f"on_conflict must be one of {', '.join(ON_CONFLICT)}, not "
                               f"{on_conflict!r}")
    if on_conflict != "raise":
        if not named:
            raise InvalidParameter(f"on_conflict={on_conflict!r} needs an identifier: a task "
                                   "with a drawn one meets no other")
        if current_batch_id() is not None:
            raise InvalidParameter(f"on_conflict={on_conflict!r} is refused in an atp.batch "
                                   "block: the task it may return is no member of the batch")
    return on_conflict


def _schedule(eta, countdown):
    """Return when the task may start: an aware datetime, or a delay from now."""
    if eta is not None and countdown is not None:
        raise InvalidParameter("give eta or countdown, not both")
    if eta is not None:
        if not isinstance(eta, datetime.datetime):
            raise InvalidParameter(f"eta must be a datetime, not {eta!r}")
        if settings.USE_TZ and timezone.is_naive(eta):
            raise InvalidParameter("eta must be timezone-aware")
        return eta
    if countdown is None:
        return datetime.timedelta(0)
    given = countdown
    if isinstance(countdown, (int, float)) and not isinstance(countdown, bool):
        try:
            countdown = datetime.timedelta(seconds=countdown)
        except (OverflowError, ValueError):  # infinite, not a number, or huge
            countdown = None
    if (not isinstance(countdown, datetime.timedelta)
            or not datetime.timedelta(0) <= countdown <= DURATION_MAX):
        raise InvalidParameter(
            f"countdown must be a number of seconds (or a timedelta) from 0 to "
            f"{DURATION_MAX.days} days, not {given!r}"
        )
    return countdown
