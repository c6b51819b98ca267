"""Which functions may run as task handlers, and the task types declared in code.

A handler is a module-level function of an installed app or of a module listed in
``ATP_HANDLER_MODULES``. A ``Type`` row names its handler by dotted path; the daemon
resolves that path here and runs nothing else, so a row naming ``os.system`` (or any
function imported into an app's module from elsewhere) is refused.

This module does not touch the database: ``@task_type`` only records a declaration,
which ``atp.engine.types.sync_declared_types`` writes to the ``Type`` table.
"""

import datetime
import functools
import importlib
import inspect
import sys
from dataclasses import dataclass

from django.apps import apps
from django.utils.module_loading import autodiscover_modules

from atp.conf import conf
from atp.exceptions import InvalidHandler, InvalidParameter
from atp.rates import parse_rate
from atp.serialization import InputFormat, check_pickle_enabled, check_text

#: Module looked for in every installed app for ``@task_type`` declarations.
AUTODISCOVER_MODULE = "tasks"

_handlers = {}
_declarations = {}


@dataclass(frozen=True)
class Declaration:
    """A task type declared in code with ``@task_type``."""

    identifier: str
    handler: str
    parameters: dict


def task_type(identifier, **parameters):
    """Declare the decorated function as the handler of task type ``identifier``.

    The type is written to the database after migrations, when a daemon starts and
    on the first ``enqueue``. The function is returned unchanged but for a
    ``task_type`` attribute holding ``identifier``. Raise ``InvalidParameter`` or
    ``InvalidHandler`` for a bad declaration. A pickle type declared while
    ``ATP_PICKLE_ENABLED`` is off is recorded, reported by ``manage.py check``
    (``atp.E014``) and not written to the database.
    """
    identifier = clean_type_identifier(identifier)
    parameters = clean_type_parameters(parameters, allow_pickle=True)

    def decorator(func):
        path = handler_path(func)
        _handlers[path] = func
        _declarations[identifier] = Declaration(identifier, path, parameters)
        func.task_type = identifier
        return func

    return decorator


def declare(identifier, handler, parameters):
    """Declare task type ``identifier``, run by the handler at the dotted path ``handler``,
    as ``@task_type`` does for a function (for types declared by atp itself, such as
    the queues of ``atp.backends.ATPBackend``)."""
    identifier = clean_type_identifier(identifier)
    _declarations[identifier] = Declaration(
        identifier, handler, clean_type_parameters(parameters, allow_pickle=True))


def declarations():
    """Return the task types declared in code, by identifier."""
    return dict(_declarations)


def autodiscover():
    """Import every installed app's ``tasks`` module and ``ATP_HANDLER_MODULES``."""
    autodiscover_modules(AUTODISCOVER_MODULE)
    for module_name in handler_modules():
        importlib.import_module(module_name)


def handler_modules():
    """Return ``ATP_HANDLER_MODULES``; none while it is not a list of module names (a
    string would name modules "t", "e"...; ``manage.py check`` says what is wrong)."""
    from atp.checks import is_valid

    return list(conf.HANDLER_MODULES) if is_valid("HANDLER_MODULES") else []


# -- handlers ------------------------------------------------------------------------


def handler_path(func):
    """Return the dotted path of a handler function; raise ``InvalidHandler``."""
    qualname = getattr(func, "__qualname__", "")
    if not inspect.isfunction(func) or "." in qualname or "<" in qualname:
        raise InvalidHandler(
            f"{func!r} cannot be a handler: a handler must be a module-level function "
            "so that daemons can import it"
        )
    return f"{func.__module__}.{qualname}"


def register_handler(func):
    """Allow ``func`` to run as a handler and return its dotted path; raise ``InvalidHandler``."""
    path = handler_path(func)
    if not is_allowed_module(func.__module__):
        raise InvalidHandler(
            f"{path} cannot be a handler: {func.__module__} is not in an installed app "
            "or in ATP_HANDLER_MODULES"
        )
    _handlers[path] = func
    return path


def is_allowed_module(module_name):
    """Return whether functions of ``module_name`` may be handlers."""
    prefixes = [config.name for config in apps.get_app_configs()]
    prefixes += handler_modules()
    return any(module_name == p or module_name.startswith(p + ".") for p in prefixes)


def resolve_handler(path, *, may_import=True):
    """Return the handler function named by ``path``; raise ``InvalidHandler``.

    Only a function defined in the module the path names, inside an installed app or
    ``ATP_HANDLER_MODULES``, is returned. Without ``may_import`` only a module this
    process has already loaded is looked into.
    """
    module_name, _, name = str(path).rpartition(".")
    if not module_name or not is_allowed_module(module_name):
        raise InvalidHandler(
            f"handler {path!r} is not in an installed app or in ATP_HANDLER_MODULES; "
            "it is not run"
        )
    func = _handlers.get(path)
    if func is not None:
        return func
    module = sys.modules.get(module_name)
    if module is None and not may_import:
        raise InvalidHandler(f"handler {path!r}: {module_name} is not loaded in this process")
    if module is None:
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # ImportError, or any error its code raised
            raise InvalidHandler(
                f"handler {path!r}: cannot import {module_name}: {exc}") from exc
    func = getattr(module, name, None)
    if not (inspect.isfunction(func) and func.__module__ == module_name
            and func.__qualname__ == name):
        raise InvalidHandler(f"handler {path!r} is not a function defined in {module_name}")
    _handlers[path] = func
    return func


# -- type parameters -----------------------------------------------------------------

IDENTIFIER_MAX_LENGTH = 255


def clean_type_identifier(identifier):
    """Return a valid type identifier; raise ``InvalidParameter``."""
    if not isinstance(identifier, str) or not identifier.strip():
        raise InvalidParameter(f"a task type identifier must be a non-empty string, not {identifier!r}")
    check_text(identifier, "a task type identifier")
    if len(identifier) > IDENTIFIER_MAX_LENGTH:
        raise InvalidParameter(
            f"a task type identifier has at most {IDENTIFIER_MAX_LENGTH} characters"
        )
    return identifier


#: Longer durations would overflow the microseconds some databases store.
DURATION_MAX = datetime.timedelta(days=36500)


def _duration(name, value, *, allow_none):
    if value is None and allow_none:
        return None
    given = value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            value = datetime.timedelta(seconds=value)
        except (OverflowError, ValueError):  # huge, or not a number (NaN)
            value = None
    if (not isinstance(value, datetime.timedelta)
            or not datetime.timedelta(0) < value <= DURATION_MAX):
        raise InvalidParameter(
            f"{name} must be a positive number of seconds or timedelta of at most "
            f"{DURATION_MAX.days} days, not {given!r}"
        )
    return value


def _count(name, value, *, minimum, maximum, allow_none):
    if value is None and allow_none:
        return None
    if (not isinstance(value, int) or isinstance(value, bool)
            or not minimum <= value <= maximum):
        raise InvalidParameter(
            f"{name} must be an integer from {minimum} to {maximum}, not {value!r}"
        )
    return value


def _flag(name, value):
    if not isinstance(value, bool):
        raise InvalidParameter(f"{name} must be True or False, not {value!r}")
    return value


def _input_format(name, value):
    if value not in InputFormat.values:
        raise InvalidParameter(f"{name} must be one of {InputFormat.values}, not {value!r}")
    return InputFormat(value)


def _text(name, value):
    check_text(value, name)
    return value


TYPE_PARAMETERS = {
    "timeout": functools.partial(_duration, allow_none=False),
    "max_restarts": functools.partial(_count, minimum=0, maximum=32767, allow_none=False),
    "retention": functools.partial(_duration, allow_none=True),
    "max_concurrency": functools.partial(_count, minimum=1, maximum=2**31 - 1, allow_none=True),
    "max_input_bytes": functools.partial(_count, minimum=1, maximum=2**31 - 1, allow_none=True),
    "max_response_bytes": functools.partial(_count, minimum=1, maximum=2**31 - 1, allow_none=True),
    "input_format": _input_format,
    "description": _text,
    "max_queued": functools.partial(_count, minimum=1, maximum=2**31 - 1, allow_none=True),
    # How long a named task's name stays taken after its task ended.
    "dedup_window": functools.partial(_duration, allow_none=True),
    # Flow control (atp.rates): starts a second, and the token bucket's size.
    "rate": parse_rate,
    "bucket_size": functools.partial(_count, minimum=1, maximum=2**31 - 1, allow_none=True),
    # The retry policy of handler failures (atp.retry).
    "retry_limit": functools.partial(_count, minimum=0, maximum=2**31 - 1, allow_none=True),
    "age_limit": functools.partial(_duration, allow_none=True),
    "min_backoff": functools.partial(_duration, allow_none=False),
    "max_backoff": functools.partial(_duration, allow_none=False),
    "max_doublings": functools.partial(_count, minimum=0, maximum=62, allow_none=False),
    "retry_jitter": _flag,
    # How often a task may snooze (atp.Snooze) before the next snooze fails it.
    "max_snoozes": functools.partial(_count, minimum=0, maximum=2**31 - 1, allow_none=True),
    # How many tasks of one key (enqueue(..., key=...)) may be in flight at once.
    "key_concurrency": functools.partial(_count, minimum=1, maximum=2**31 - 1, allow_none=True),
    # Starts a second of one key, and its token bucket's size (atp.rates).
    "key_rate": parse_rate,
    "key_bucket_size": functools.partial(_count, minimum=1, maximum=2**31 - 1, allow_none=True),
}


def clean_type_parameters(parameters, *, allow_pickle=False):
    """Return task type parameters normalised for the ``Type`` model; raise ``InvalidParameter``.

    ``input_format="pickle"`` is refused while ``ATP_PICKLE_ENABLED`` is off, unless
    ``allow_pickle`` (a declaration, which the system checks report instead).
    """
    unknown = sorted(set(parameters) - set(TYPE_PARAMETERS))
    if unknown:
        raise InvalidParameter(
            f"unknown task type parameter(s) {', '.join(unknown)}; "
            f"known: {', '.join(TYPE_PARAMETERS)}"
        )
    cleaned = {name: TYPE_PARAMETERS[name](name, value) for name, value in parameters.items()}
    if cleaned.get("min_backoff", datetime.timedelta(0)) > cleaned.get("max_backoff",
                                                                      DURATION_MAX):
        raise InvalidParameter(
            f"min_backoff ({cleaned['min_backoff']}) is longer than max_backoff "
            f"({cleaned['max_backoff']})")
    if cleaned.get("input_format") == InputFormat.PICKLE and not allow_pickle:
        check_pickle_enabled()
    return cleaned


def is_pickled(declaration):
    """Return whether a declaration's type takes pickled inputs."""
    return declaration.parameters.get("input_format") == InputFormat.PICKLE
