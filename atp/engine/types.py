"""Registering, looking up, pausing and removing task types."""

from django.db import IntegrityError, connections
from django.db.models.deletion import ProtectedError
from django.utils import timezone

from atp import registry
from atp.conf import conf
from atp.db import database_now
from atp.engine.base import actor_label, database, queue_write
from atp.engine.locks import for_update
from atp.engine.notify import notify_runnable
from atp.exceptions import InvalidParameter, TaskTypeInUse, TaskTypeNotFound
from atp.models import Instance, LogRecord, Task, Type
from atp.rates import DEFAULT_BUCKET_SIZE, tokens_now
from atp.retry import DEFAULT_MAX_BACKOFF, DEFAULT_MIN_BACKOFF
from atp.serialization import check_text
from atp.states import TRANSITIONS, Status


def register_task_type(identifier, handler, **parameters):
    """Create task type ``identifier`` run by ``handler``, or update it; return the ``Type``.

    ``handler`` is a module-level function, or its dotted path, of an installed app or
    of ``ATP_HANDLER_MODULES``. Parameters (``timeout``, ``max_restarts``,
    ``retention``, ``max_concurrency``, ``input_format``, ``description``) not given
    keep their current value, or their default for a new type. Raise
    ``InvalidHandler`` or ``InvalidParameter``; nothing changes then.
    """
    identifier = registry.clean_type_identifier(identifier)
    parameters = registry.clean_type_parameters(parameters)
    if callable(handler):
        path = registry.register_handler(handler)
    else:
        path = str(handler)
        check_text(path, "a handler path")
        registry.resolve_handler(path)
    return _save_type(identifier, path, parameters)


#: What a pull type does not take: its consumers lease what they can do, for as long as
#: they say (``lease_seconds``), and no daemon runs it.
NOT_FOR_PULL = ("timeout", "max_concurrency", "rate", "bucket_size")


def register_pull_type(identifier, **parameters):
    """Create pull type ``identifier``, or update it; return the ``Type``.

    Its tasks are leased by consumers outside atpd (``lease_tasks``) and never run by a
    daemon, so it has no handler. It takes the parameters of ``register_task_type``
    but ``timeout`` (each lease has its own length), ``max_concurrency``, ``rate`` and
    ``bucket_size``. Raise ``InvalidParameter``, or ``TaskTypeInUse`` to turn a type
    with queued tasks into a pull type; nothing changes then.
    """
    identifier = registry.clean_type_identifier(identifier)
    parameters = registry.clean_type_parameters(parameters)
    _check_pull_parameters(parameters)
    return _save_type(identifier, "", parameters, pull=True)


def _check_pull_parameters(parameters):
    refused = [name for name in NOT_FOR_PULL if name in parameters]
    if refused:
        raise InvalidParameter(
            f"a pull type takes no {', '.join(refused)}: its consumers lease as many tasks "
            "as they can do, for as long as they ask")


@queue_write
def _save_type(identifier, handler_path, parameters, *, pull=False):
    stored = for_update(Type.objects.filter(identifier=identifier)).first()
    if stored is not None and stored.pull != pull:
        _check_queue_empty(stored, pull)
    if pull:
        parameters = {**parameters, **{name: None for name in NOT_FOR_PULL if name != "timeout"}}
    _check_backoffs(stored, parameters)
    parameters = _check_rate(stored, parameters)
    task_type, _ = Type.objects.update_or_create(
        identifier=identifier, defaults={"handler": handler_path, "pull": pull, **parameters}
    )
    return task_type


def _check_queue_empty(task_type, pull):
    """Raise ``TaskTypeInUse`` while ``task_type`` has queued tasks: a daemon's lease and a
    consumer's must never meet on one type. The type's row is locked FOR UPDATE first,
    which an enqueue's foreign key (KEY SHARE) waits for: no task of the type is
    enqueued between the count and the switch's commit."""
    list(Type.objects.select_for_update().filter(pk=task_type.pk).values_list("pk"))
    queued = Task.objects.filter(type=task_type).count()
    if queued:
        became = "a pull type" if pull else "a type atpd runs"
        raise TaskTypeInUse(
            f"task type {task_type.identifier!r} has {queued} task(s) in the queue; it "
            f"becomes {became} only once they ended")


def _check_backoffs(task_type, parameters):
    """Raise ``InvalidParameter`` when the type would wait longer before its first retry
    than between any two (one of the two given, the other as stored or by default)."""
    least = parameters.get("min_backoff", getattr(task_type, "min_backoff", DEFAULT_MIN_BACKOFF))
    most = parameters.get("max_backoff", getattr(task_type, "max_backoff", DEFAULT_MAX_BACKOFF))
    if least > most:
        raise InvalidParameter(f"min_backoff ({least}) is longer than max_backoff ({most})")


def _check_rate(task_type, parameters):
    """Return ``parameters`` with the bucket they leave when they change the type's
    ``rate`` or ``bucket_size``: the tokens it holds now (refilled at the old rate), at
    most the new size, so that a change never grants a burst; a full one for a type that
    had no rate. Raise ``InvalidParameter`` for a ``bucket_size`` without a rate (one of
    the two given, the other as stored)."""
    rate = parameters.get("rate", getattr(task_type, "rate", None))
    size = parameters.get("bucket_size", getattr(task_type, "bucket_size", None))
    if size is not None and rate is None:
        raise InvalidParameter("bucket_size needs a rate: it is the size of the rate's bucket")
    changed = any(name in parameters and parameters[name] != getattr(task_type, name, None)
                  for name in ("rate", "bucket_size"))
    if not changed:
        return parameters
    if rate is None or getattr(task_type, "rate", None) is None:
        return {**parameters, "tokens": None, "tokens_at": None}  # none, or a full bucket
    now = database_now(database())
    held = tokens_now(task_type.rate, task_type.bucket_size, task_type.tokens,
                      task_type.tokens_at, now)
    return {**parameters, "tokens": min(held, size or DEFAULT_BUCKET_SIZE), "tokens_at": now}


def sync_declared_types():
    """Write every ``@task_type`` declaration to the database; return the types.

    A pickle type is left out while ``ATP_PICKLE_ENABLED`` is off (``manage.py check``
    says so). Raise ``InvalidHandler`` for a declared handler that may not run.
    """
    declarations = [declaration for declaration in registry.declarations().values()
                    if conf.PICKLE_ENABLED or not registry.is_pickled(declaration)]
    for declaration in declarations:
        _check_declaration(declaration)
    identifiers = [declaration.identifier for declaration in declarations]
    stored = Type.objects.in_bulk(identifiers, field_name="identifier")
    missing = [declaration for declaration in declarations if declaration.identifier not in stored]
    if missing:
        _create(missing)
        stored = Type.objects.in_bulk(identifiers, field_name="identifier")
    return [_write(declaration, stored.get(declaration.identifier)) for declaration in declarations]


@queue_write
def _create(declarations):
    """Insert the types of ``declarations`` in one statement: a fresh database's first
    ``migrate`` and a test's flush write them all. One another process inserted meanwhile
    is left to ``_write``."""
    rows = []
    for declaration in declarations:  # the checks of _save_type, for a type not stored
        _check_backoffs(None, declaration.parameters)
        parameters = _check_rate(None, declaration.parameters)
        rows.append(Type(identifier=declaration.identifier, handler=declaration.handler,
                         **parameters))
    Type.objects.bulk_create(rows, ignore_conflicts=True)


def _check_declaration(declaration):
    registry.resolve_handler(declaration.handler)
    if registry.is_pickled(declaration):
        registry.check_pickle_enabled()


def _write(declaration, stored=None):
    """Write ``declaration``, checked; return its type. A ``stored`` row that already says
    what the declaration says is returned as it is: every daemon's start and every
    ``migrate`` syncs all declarations, and rewriting the unchanged ones would take a write
    lock per type (SQLite's whole database) for nothing."""
    if stored is not None and _says(stored, declaration):
        return stored
    return _save_type(declaration.identifier, declaration.handler, declaration.parameters)


def _says(stored, declaration):
    """Return whether the ``stored`` type is what ``declaration`` would write."""
    return (not stored.pull and stored.handler == declaration.handler
            and all(getattr(stored, name) == value for name, value in declaration.parameters.items()))


def get_type(identifier):
    """Return the ``Type`` registered as ``identifier``; raise ``TaskTypeNotFound``.

    A type declared in code with ``@task_type`` but not yet in the database is
    written there first.
    """
    if isinstance(identifier, Type):
        return identifier
    if isinstance(identifier, str):
        registry.clean_type_identifier(identifier)
    try:
        return Type.objects.get(identifier=identifier)
    except Type.DoesNotExist:
        declaration = registry.declarations().get(identifier)
        if declaration is None:
            raise TaskTypeNotFound(f"no task type {identifier!r} is registered") from None
        _check_declaration(declaration)
        return _write(declaration)


def catalog_rows():
    """Return what a daemon needs of every type to know whether it runs it and how it
    claims its tasks: ``(id, identifier, handler, input_format, max_concurrency, rate,
    pull, gated)`` tuples."""
    return list(Type.objects.values_list("pk", "identifier", "handler", "input_format",
                                         "max_concurrency", "rate", "pull", "gated"))


def update_task_type(identifier, **parameters):
    """Change only the given parameters of task type ``identifier``; return the ``Type``.

    For tuning a type without naming its handler (the admin does this). Parameters
    are those of ``register_task_type``. Raise ``TaskTypeNotFound`` or
    ``InvalidParameter``; nothing changes then.
    """
    parameters = registry.clean_type_parameters(parameters)
    return _update_type(identifier, parameters)


@queue_write
def _update_type(identifier, parameters):
    task_type = find_type(identifier)
    if task_type.pull:
        _check_pull_parameters(parameters)
    if parameters:
        stored = for_update(Type.objects.filter(pk=task_type.pk)).get()
        _check_backoffs(stored, parameters)
        parameters = _check_rate(stored, parameters)
        Type.objects.filter(pk=task_type.pk).update(**parameters, updated=timezone.now())
        # A longer time-out or a higher concurrency can let waiting tasks start.
        notify_runnable()
        task_type.refresh_from_db()
    return task_type


@queue_write
def unregister_task_type(identifier):
    """Delete task type ``identifier``; raise ``TaskTypeInUse`` while it has tasks or schedules."""
    task_type = find_type(identifier)
    # Its row first: a daemon recording that it serves the type (serve_types locks it
    # before it refers to it) waits, then finds it gone; or it committed before, and its
    # reference is among those deleted here.
    list(Type.objects.select_for_update().filter(pk=task_type.pk).values_list("pk"))
    count = Instance.objects.filter(type=task_type).count()
    if count:
        raise TaskTypeInUse(
            f"task type {task_type.identifier!r} still has {count} task(s); "
            "delete or purge them first"
        )
    schedules = list(task_type.schedules.values_list("name", flat=True))
    if schedules:
        raise TaskTypeInUse(
            f"task type {task_type.identifier!r} is run by schedule(s) {', '.join(schedules)}; "
            "unschedule them first"
        )
    try:
        task_type.delete()
    except (ProtectedError, IntegrityError):
        raise TaskTypeInUse(f"task type {task_type.identifier!r} still has tasks") from None


def pause_type(identifier):
    """Stop starting tasks of type ``identifier`` (queued ones wait); return the ``Type``."""
    return _set_paused(identifier, True)


def resume_type(identifier):
    """Start tasks of a paused type ``identifier`` again; return the ``Type``."""
    return _set_paused(identifier, False)


@queue_write
def _set_paused(identifier, is_paused):
    task_type = find_type(identifier)
    Type.objects.filter(pk=task_type.pk).update(is_paused=is_paused, updated=timezone.now())
    if not is_paused:
        notify_runnable()
    task_type.refresh_from_db()
    return task_type


def find_type(identifier):
    """Return the ``Type`` registered as ``identifier``; raise ``TaskTypeNotFound``."""
    if isinstance(identifier, Type):
        identifier = identifier.identifier
    if not isinstance(identifier, str):
        raise InvalidParameter(f"{identifier!r} is not a task type identifier")
    registry.clean_type_identifier(identifier)
    try:
        return Type.objects.get(identifier=identifier)
    except Type.DoesNotExist:
        raise TaskTypeNotFound(f"no task type {identifier!r} is registered") from None



def purge_type(identifier, reason="", *, by=None, batch_size=None):
    """Cancel every task of type ``identifier`` that waits in the queue (ACCEPTED, or held
    PAUSED), in batches of ``batch_size`` (``ATP_PURGE_BATCH_SIZE``), each its own
    transaction, with ``reason`` in each task's history; return how many were cancelled.

    Tasks a daemon holds (claimed or running) are left to run: cancel them one by one.
    The type keeps accepting tasks (pause it first to stop new ones starting). Raise
    ``TaskTypeNotFound``, or ``InvalidParameter`` for a bad batch size or a reason no
    database stores; nothing is cancelled then.
    """
    task_type = find_type(identifier)
    size = conf.PURGE_BATCH_SIZE if batch_size is None else batch_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise InvalidParameter(f"batch_size must be a positive integer, not {size!r}")
    message = reason or f"purged: the waiting tasks of type {task_type.identifier} were cancelled"
    check_text(message, "a purge's reason")
    cancelled, after = 0, 0
    while True:
        done, last = _purge_batch(task_type.pk, message, actor_label(by), size, after)
        cancelled += done
        if last is None:
            return cancelled
        after = last


@queue_write
def _purge_batch(type_id, message, actor, size, after):
    """Cancel the waiting tasks among the next ``size`` unleased queue rows of the type
    with keys above ``after``; return how many, and the last key looked at (None: no
    row was left). Rows another transaction holds (a claim) are skipped."""
    rows = Task.objects.filter(type_id=type_id, daemon__isnull=True,
                               instance_id__gt=after).order_by("instance_id")
    if connections[database()].features.has_select_for_update_skip_locked:
        rows = rows.select_for_update(skip_locked=True)
    pks = list(rows.values_list("instance_id", flat=True)[:size])
    if not pks:
        return 0, None
    # The queue rows are locked, then the tasks (the order of atp.engine.locks).
    tasks = {pk: (status, attempt) for pk, status, attempt in for_update(
        Instance.objects.filter(pk__in=pks)).values_list("pk", "status", "attempt")}
    waiting = [pk for pk in pks if pk in tasks and tasks[pk][0] in PURGEABLE]
    if waiting:
        now = database_now(database())
        Task.objects.filter(instance_id__in=waiting).delete()
        Instance.objects.filter(pk__in=waiting, status__in=PURGEABLE).update(
            status=Status.CANCELLED, finished=now, updated=now)
        LogRecord.objects.bulk_create(
            LogRecord(instance_id=pk, time=now, status=Status.CANCELLED, attempt=tasks[pk][1],
                      message=message, actor=actor)
            for pk in waiting)
    return len(waiting), pks[-1]


#: What a purge cancels: a task waiting in the queue, or held there paused.
PURGEABLE = (Status.ACCEPTED, Status.PAUSED)
assert all(Status.CANCELLED in TRANSITIONS[status] for status in PURGEABLE)
