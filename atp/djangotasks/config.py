"""Which atp task types stand behind the ``TASKS`` backends that are ``ATPBackend``, with
what parameters; read from the settings alone, without the Tasks framework, so that
``atp.apps`` and the system checks can use it.

Each queue of such a backend is one atp task type, ``django.tasks/<alias>/<queue>``,
run by ``atp.djangotasks.runner.run``. Its parameters (time-out, restarts, retention,
concurrency...) come from the backend's ``OPTIONS``: the keys of
``atp.registry.TYPE_PARAMETERS`` at its top level apply to every queue, and
``OPTIONS["QUEUES"][<queue>]`` overrides them for one queue. A task function that
needs parameters of its own is given a queue of its own (``@task(queue_name=...)``).
``atpd --queues`` serves the types of the queues it names.
"""

from django.conf import settings

from atp.registry import TYPE_PARAMETERS, clean_type_identifier, clean_type_parameters

BACKEND_PATH = "atp.backends.ATPBackend"
HANDLER = "atp.djangotasks.runner.run"
PREFIX = "django.tasks/"
DEFAULT_QUEUE = "default"
#: The parameters a backend's OPTIONS may set: atp's own, less what the framework fixes.
PARAMETERS = sorted(set(TYPE_PARAMETERS) - {"input_format"})
#: OPTIONS keys that are not a parameter.
OPTION_KEYS = {"QUEUES"}


def type_identifier(alias, queue_name):
    """Return the identifier of the atp task type of queue ``queue_name`` of backend ``alias``."""
    return clean_type_identifier(f"{PREFIX}{alias}/{queue_name}")


def parse_identifier(identifier):
    """Return ``(alias, queue name)`` of a task type identifier, or None when it is not one
    of a Django Tasks queue."""
    if not identifier.startswith(PREFIX):
        return None
    alias, slash, queue_name = identifier[len(PREFIX):].partition("/")
    return (alias, queue_name) if slash else None


def atp_backends():
    """Return ``{alias: params}`` of the ``TASKS`` backends that are ``ATPBackend``."""
    configured = getattr(settings, "TASKS", None)
    if not isinstance(configured, dict):
        return {}
    return {alias: params for alias, params in configured.items()
            if isinstance(params, dict) and params.get("BACKEND") == BACKEND_PATH}


def queue_names(params):
    """Return the queue names of a backend's settings (the framework's default: one,
    ``default``)."""
    return list(params.get("QUEUES", [DEFAULT_QUEUE]))


def queue_types(names):
    """Return the task type identifiers of the queues ``names`` (in every ``ATPBackend``
    that has them); raise ``InvalidParameter`` for a name none has."""
    from atp.exceptions import InvalidParameter

    backends = atp_backends()
    known = {name: [type_identifier(alias, name) for alias, params in backends.items()
                    if name in queue_names(params)]
             for params in backends.values() for name in queue_names(params)}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise InvalidParameter(
            f"no Django Tasks queue {', '.join(map(repr, unknown))} in TASKS backends that are "
            f"{BACKEND_PATH}; known: {', '.join(map(repr, sorted(known))) or 'none'}")
    return [identifier for name in names for identifier in known[name]]


def problems(alias, params):
    """Return what is wrong with backend ``alias``'s settings, as sentences (empty: nothing)."""
    found = []
    queues = params.get("QUEUES", [DEFAULT_QUEUE])
    if not isinstance(queues, (list, tuple, set)) or not queues or not all(
            isinstance(name, str) and name for name in queues):
        return [f"QUEUES must be a non-empty list of queue names, not {queues!r}"]
    options = params.get("OPTIONS", {})
    if not isinstance(options, dict):
        return [f"OPTIONS must be a dict, not {options!r}"]
    unknown = sorted(set(options) - set(PARAMETERS) - OPTION_KEYS)
    if unknown:
        found.append(f"unknown OPTIONS {', '.join(map(repr, unknown))}; known: "
                     f"{', '.join(PARAMETERS)} and QUEUES (per queue)")
    per_queue = options.get("QUEUES", {})
    if not isinstance(per_queue, dict):
        return [*found, f"OPTIONS['QUEUES'] must map queue names to parameters, not {per_queue!r}"]
    for name in sorted(set(per_queue) - set(queues)):
        found.append(f"OPTIONS['QUEUES'] sets queue {name!r}, which is not in QUEUES")
    for name in queues:
        if "," in name or name != name.strip():
            found.append(f"queue {name!r}: a queue name without commas or surrounding spaces "
                         "can be given to atpd --queues")
        try:
            type_identifier(alias, name)
            parameters(params, name)
        except Exception as exc:  # InvalidParameter, or a mapping of the wrong kind
            found.append(f"queue {name!r}: {exc}")
    return found


def parameters(params, queue_name):
    """Return the atp task type parameters of queue ``queue_name``, cleaned; raise
    ``InvalidParameter`` (or ``TypeError`` for a queue's entry that is not a mapping)."""
    options = params.get("OPTIONS", {})
    chosen = {name: value for name, value in options.items() if name in PARAMETERS}
    unknown = sorted(set(options) - set(PARAMETERS) - OPTION_KEYS)
    own = dict(options.get("QUEUES", {}).get(queue_name, {}))
    unknown += sorted(set(own) - set(PARAMETERS))
    if unknown:
        from atp.exceptions import InvalidParameter

        raise InvalidParameter(f"unknown parameter(s) {', '.join(unknown)}; known: "
                               f"{', '.join(PARAMETERS)}")
    chosen.update(own)
    chosen.setdefault("description", f"Django Tasks queue {queue_name!r}")
    return clean_type_parameters(chosen)


def declare_types():
    """Declare the task type of every queue of every ``ATPBackend`` (``@task_type``'s way:
    written after migrations, when a daemon starts and at the first enqueue). A backend
    whose settings are wrong is left out; the system checks report it."""
    from atp import registry

    for alias, params in atp_backends().items():
        if problems(alias, params):
            continue
        for name in queue_names(params):
            registry.declare(type_identifier(alias, name), HANDLER, parameters(params, name))
