"""System checks for django-atp's settings, each with a stable id.

atp.E001  ATP_HANDLER_MODULES is not a list of module names.
atp.E002  ATP_SQLITE_WAL is not a boolean.
atp.E003  ATP_TRANSACTION_RETRY_SECONDS is not a non-negative number.
atp.E004  ATP_PURGE_BATCH_SIZE is not a positive integer.
atp.E005  The admin is installed without django_admin_listfilter_dropdown.
atp.E006  A type declared with @task_type has a handler that may not run.
atp.E007  A daemon timing setting is not a positive number of seconds.
atp.E008  ATP_DAEMON_TIMEOUT_SECONDS leaves no lease: it must exceed two heartbeat
          intervals plus the kill grace.
atp.E009  ATP_TRACEBACK_MAX_CHARS is not a positive integer.
atp.E010  ATP_PROGRESS_INTERVAL_SECONDS is not a non-negative number.
atp.E011  USE_TZ is False: task times come from the database clock as aware datetimes.
atp.E012  ATP_MAX_INPUT_BYTES or ATP_MAX_RESPONSE_BYTES is not a positive integer.
atp.E013  ATP_PICKLE_ENABLED is not a boolean.
atp.E014  A type declared with input_format="pickle" while ATP_PICKLE_ENABLED is off.
atp.E015  ATP_ENGINE is neither "auto" nor "orm".
atp.E016  ATP_PREPARED_STATEMENTS is not a boolean.
atp.E022  ATP_SCHEDULE_GRACE_SECONDS is not a non-negative number.
atp.E023  ATP_UNSEALED_BATCH_SECONDS is not a non-negative number.
"""

from django.apps import apps
from django.conf import settings
from django.core.checks import Error, Tags, register
from django.core.exceptions import ImproperlyConfigured

from atp.conf import conf
from atp.exceptions import InvalidHandler


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@register(Tags.compatibility)
def check_settings(app_configs=None, **kwargs):
    errors = []
    modules = conf.HANDLER_MODULES
    if not isinstance(modules, (list, tuple)) or not all(isinstance(m, str) for m in modules):
        errors.append(Error(
            "ATP_HANDLER_MODULES must be a list of module names.",
            hint="For example ATP_HANDLER_MODULES = ['myproject.handlers'].", id="atp.E001",
        ))
    if not isinstance(conf.PICKLE_ENABLED, bool):
        errors.append(Error("ATP_PICKLE_ENABLED must be True or False.", id="atp.E013"))
    if not isinstance(conf.SQLITE_WAL, bool):
        errors.append(Error("ATP_SQLITE_WAL must be True or False.", id="atp.E002"))
    if conf.ENGINE not in ("auto", "orm"):
        errors.append(Error('ATP_ENGINE must be "auto" or "orm".', id="atp.E015"))
    if not isinstance(conf.PREPARED_STATEMENTS, bool):
        errors.append(Error("ATP_PREPARED_STATEMENTS must be True or False.", id="atp.E016"))
    errors += _non_negative_seconds("TRANSACTION_RETRY_SECONDS", "atp.E003")
    if not _is_positive_int(conf.PURGE_BATCH_SIZE):
        errors.append(Error("ATP_PURGE_BATCH_SIZE must be a positive integer.", id="atp.E004"))
    if conf.MAX_QUEUED_TOTAL is not None and not _is_positive_int(conf.MAX_QUEUED_TOTAL):
        errors.append(Error("ATP_MAX_QUEUED_TOTAL must be a positive integer or None.",
                            id="atp.E017"))
    errors += _check_daemon_timing()
    errors += _non_negative_seconds("PROGRESS_INTERVAL_SECONDS", "atp.E010")
    errors += _non_negative_seconds("SCHEDULE_GRACE_SECONDS", "atp.E022")
    errors += _non_negative_seconds("UNSEALED_BATCH_SECONDS", "atp.E023")
    if not _is_positive_int(conf.TRACEBACK_MAX_CHARS):
        errors.append(Error("ATP_TRACEBACK_MAX_CHARS must be a positive integer.", id="atp.E009"))
    for name in ("MAX_INPUT_BYTES", "MAX_RESPONSE_BYTES"):
        if not _is_positive_int(getattr(conf, name)):
            errors.append(Error(f"ATP_{name} must be a positive integer (bytes).", id="atp.E012"))
    if not settings.USE_TZ:
        errors.append(Error(
            "django-atp needs USE_TZ = True.",
            hint="Task times are read from the database clock and compared as aware "
                 "datetimes; naive ones would be off by the server's UTC offset.",
            id="atp.E011",
        ))
    return errors


def _non_negative_seconds(name, error_id):
    value = getattr(conf, name)
    if _is_number(value) and value >= 0:
        return []
    return [Error(f"ATP_{name} must be a non-negative number of seconds.", id=error_id)]


def _is_positive_int(value):
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


DAEMON_TIMINGS = (
    "POLL_INTERVAL_SECONDS", "HEARTBEAT_INTERVAL_SECONDS", "DAEMON_TIMEOUT_SECONDS",
    "WORKER_KILL_GRACE_SECONDS", "SHUTDOWN_TIMEOUT_SECONDS", "DAEMON_RETENTION_SECONDS",
)


def _check_daemon_timing():
    errors = [
        Error(f"ATP_{name} must be a positive number of seconds.", id="atp.E007")
        for name in DAEMON_TIMINGS
        if not _is_number(getattr(conf, name)) or getattr(conf, name) <= 0
    ]
    if errors:
        return errors
    needed = 2 * conf.HEARTBEAT_INTERVAL_SECONDS + conf.WORKER_KILL_GRACE_SECONDS
    if conf.DAEMON_TIMEOUT_SECONDS <= needed:
        errors.append(Error(
            f"ATP_DAEMON_TIMEOUT_SECONDS ({conf.DAEMON_TIMEOUT_SECONDS:g}) must exceed two "
            f"heartbeat intervals plus the kill grace ({needed:g}).",
            hint="A daemon stops its tasks that long before others may restart them; "
            "see docs/daemon.md.",
            id="atp.E008",
        ))
    return errors


@register(Tags.admin)
def check_admin_dependencies(app_configs=None, **kwargs):
    if apps.is_installed("django.contrib.admin") and not apps.is_installed(
        "django_admin_listfilter_dropdown"
    ):
        return [Error(
            "django-atp's admin needs 'django_admin_listfilter_dropdown' in INSTALLED_APPS.",
            hint="INSTALLED_APPS += ['django_admin_listfilter_dropdown', 'atp']",
            id="atp.E005",
        )]
    return []


@register()
def check_declared_handlers(app_configs=None, **kwargs):
    from atp import registry

    if not isinstance(conf.HANDLER_MODULES, (list, tuple)):
        return []  # atp.E001 already reports it
    errors = []
    for declaration in registry.declarations().values():
        if registry.is_pickled(declaration) and conf.PICKLE_ENABLED is not True:
            errors.append(Error(
                f"Task type {declaration.identifier!r} takes pickled inputs, and "
                "ATP_PICKLE_ENABLED is off: it is not registered and its tasks do not run.",
                hint="Pickled inputs run whatever they unpickle to. Pass JSON inputs, or set "
                "ATP_PICKLE_ENABLED = True (and never run atpd as root); see docs/security.md.",
                id="atp.E014",
            ))
        try:
            registry.resolve_handler(declaration.handler)
        except InvalidHandler as exc:
            errors.append(Error(
                f"Task type {declaration.identifier!r}: {exc}",
                hint="Declare handlers in an installed app (its tasks.py) or list their "
                "module in ATP_HANDLER_MODULES.",
                id="atp.E006",
            ))
    return errors


@register()
def check_django_tasks_backends(app_configs=None, **kwargs):
    """The ``TASKS`` backends that are ``atp.backends.ATPBackend`` must be able to work."""
    from atp.djangotasks import config

    backends = config.atp_backends()
    errors = []
    if backends:
        try:
            import atp.djangotasks.compat  # noqa: F401
        except ImproperlyConfigured as exc:
            errors.append(Error(str(exc), id="atp.E021"))
    for alias, params in backends.items():
        errors += [Error(f"TASKS[{alias!r}]: {problem}", id="atp.E020")
                   for problem in config.problems(alias, params)]
    return errors
