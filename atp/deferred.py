"""``atp.defer``: run any module-level function of an installed app asynchronously, as
App Engine's ``deferred.defer`` does.

    atp.defer(send_invoice, order.pk, _countdown=60)

The call is queued as a task of type ``atp.deferred`` (declared by atp), or of any
type whose handler is ``atp.deferred.run`` (``_queue``), with the function's dotted path
and its arguments as inputs (JSON, with the types atp's inputs round-trip: datetimes,
decimals, UUIDs, tuples, bytes). A function that atpd could not import by its path (not
module-level, or outside installed apps and ``ATP_HANDLER_MODULES``, or a function of
atp or Django themselves) is refused when the call is queued, and again when it runs. What the function returns is the task's response.
"""

from atp import registry
from atp.engine.enqueue import enqueue
from atp.engine.types import get_type
from atp.exceptions import InvalidHandler, InvalidParameter

#: The type ``atp.defer`` queues to by default, and its handler.
DEFERRED_TYPE = "atp.deferred"
RUNNER = "atp.deferred.run"


def defer(func, *args, _countdown=None, _eta=None, _name=None, _priority=0,
          _queue=DEFERRED_TYPE, **kwargs):
    """Queue a call of ``func(*args, **kwargs)``; return its task (an ``Instance``).

    ``func`` is a module-level function of an installed app or ``ATP_HANDLER_MODULES``
    (or its dotted path). ``_countdown``, ``_eta``, ``_name`` (the task's identifier),
    ``_priority`` are ``enqueue``'s; ``_queue`` names the task type. Raise
    ``InvalidHandler`` for a function that cannot run, ``InvalidParameter`` for a type
    that does not run deferred calls, and what ``enqueue`` raises.
    """
    path = func if isinstance(func, str) else registry.handler_path(func)
    resolve(path)
    task_type = get_type(_queue)
    if task_type.handler != RUNNER:
        raise InvalidParameter(
            f"task type {task_type.identifier!r} does not run deferred calls (its handler is "
            f"{task_type.handler}); register one with the handler {RUNNER!r}")
    return enqueue(task_type, {"function": path, "args": list(args), "kwargs": kwargs},
                   identifier=_name, priority=_priority, eta=_eta, countdown=_countdown)


def run(task, inputs):
    """The handler of deferred calls: call the function the inputs name."""
    function = resolve(inputs["function"])
    return function(*inputs.get("args", ()), **inputs.get("kwargs", {}))


#: Packages whose functions are never run as deferred calls, though installed apps: a
#: deferred call's path is in its inputs, and atp's own verbs (unregistering a type,
#: purging) or Django's must not be one write of a row away.
NOT_DEFERRABLE = ("atp", "django")


def resolve(path):
    """Return the function at ``path``; raise ``InvalidHandler`` for one that may not be
    deferred (see ``registry.resolve_handler``, and ``NOT_DEFERRABLE``)."""
    module = str(path).rpartition(".")[0]
    if any(module == package or module.startswith(package + ".") for package in NOT_DEFERRABLE):
        raise InvalidHandler(f"{path} cannot be deferred: atp.defer runs no function of "
                             f"{', '.join(NOT_DEFERRABLE)} itself")
    return registry.resolve_handler(path)


def declare():
    """Declare the default type of deferred calls (written after migrations, when a
    daemon starts and at the first ``defer``)."""
    registry.declare(DEFERRED_TYPE, RUNNER, {"description": "calls queued with atp.defer"})
