"""System checks for django-atp, each with a stable id.

Every ``ATP_*`` setting has one rule in ``SETTINGS`` (in ``atp/conf.py``'s order): its
type, its range, and for numbers that they are finite. ``RELATIONS`` are the rules
between settings, checked once each of their settings passed its own.

atp.E001  ATP_HANDLER_MODULES is not a list of module names.
atp.E002  ATP_SQLITE_WAL is not a boolean.
atp.E003  ATP_TRANSACTION_RETRY_SECONDS is not a number of seconds, 0 or more.
atp.E004  ATP_PURGE_BATCH_SIZE is not a positive integer.
atp.E005  The admin is installed without django_admin_listfilter_dropdown.
atp.E006  A type declared with @task_type has a handler that may not run.
atp.E007  A daemon timing setting is not a number of seconds more than 0.
atp.E008  ATP_DAEMON_TIMEOUT_SECONDS leaves no lease: it must exceed two heartbeat
          intervals plus the kill grace.
atp.E009  ATP_TRACEBACK_MAX_CHARS is not a positive integer.
atp.E010  ATP_PROGRESS_INTERVAL_SECONDS is not a number of seconds, 0 or more.
atp.E011  USE_TZ is False: task times come from the database clock as aware datetimes.
atp.E012  ATP_MAX_INPUT_BYTES or ATP_MAX_RESPONSE_BYTES is not a positive integer.
atp.E013  ATP_PICKLE_ENABLED is not a boolean.
atp.E014  A type declared with input_format="pickle" while ATP_PICKLE_ENABLED is off.
atp.E015  ATP_ENGINE is neither "auto" nor "orm".
atp.E016  ATP_PREPARED_STATEMENTS is not a boolean.
atp.E017  ATP_MAX_QUEUED_TOTAL is neither a positive integer nor None.
atp.E022  ATP_SCHEDULE_GRACE_SECONDS is not a number of seconds, 0 or more.
atp.E023  ATP_UNSEALED_BATCH_SECONDS is not a number of seconds, 0 or more.
atp.E024  ATP_UNSEALED_BATCH_SECONDS does not exceed two heartbeat intervals.
atp.E025  ATP_METRICS_TOKEN is neither None nor a token of 16 characters or more.
atp.E026  ATP_METRICS_WINDOW_SECONDS is not a number of seconds more than 0.
atp.W001  An SQLite database runs the project's transactions deferred (Django 5.1+).
atp.W002  ATP_METRICS_TOKEN is set but prometheus-client is not installed.
atp.W003  A MariaDB/MySQL database connects with the 3-byte "utf8" character set.
"""

import importlib.util
import math
import re
from dataclasses import dataclass

import django
from django.apps import apps
from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from atp.conf import conf
from atp.exceptions import InvalidHandler

#: The most seconds a duration may be (about 31 years): far from where datetime
#: arithmetic, the databases' intervals and the operating system's timers overflow.
MAX_SECONDS = 10**9
#: The largest count a setting may be: what every database's integer column holds.
MAX_COUNT = 2**31 - 1


def _is_number(value):
    # True and False are ints to Python, never a number of seconds to a reader.
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class Flag:
    """A setting that is True or False."""

    id: str
    requirement = "True or False"

    def accepts(self, value):
        return isinstance(value, bool)


@dataclass(frozen=True)
class OneOf:
    """A setting that is one of a few strings."""

    id: str
    choices: tuple

    @property
    def requirement(self):
        return " or ".join(f'"{choice}"' for choice in self.choices)

    def accepts(self, value):
        return isinstance(value, str) and value in self.choices


@dataclass(frozen=True)
class ModuleNames:
    """A list (or tuple) of dotted module names."""

    id: str
    requirement = "a list of dotted module names, such as ['myproject.handlers']"

    def accepts(self, value):
        return isinstance(value, (list, tuple)) and all(
            isinstance(name, str) and name and all(part.isidentifier() for part in name.split("."))
            for name in value)


@dataclass(frozen=True)
class Seconds:
    """A finite duration in seconds, more than 0 (or, where said, 0 too), at most MAX_SECONDS."""

    id: str
    zero_allowed: bool = False

    @property
    def requirement(self):
        least = "0 or more" if self.zero_allowed else "more than 0"
        return f"a finite number of seconds, {least} and at most {MAX_SECONDS}"

    def accepts(self, value):
        return (_is_number(value) and math.isfinite(value) and value <= MAX_SECONDS
                and (value > 0 or (self.zero_allowed and value == 0)))


@dataclass(frozen=True)
class Count:
    """A positive integer up to MAX_COUNT (or, where said, None: no limit)."""

    id: str
    none_allowed: bool = False

    @property
    def requirement(self):
        return f"an integer from 1 to {MAX_COUNT}" + (", or None" if self.none_allowed else "")

    def accepts(self, value):
        if value is None:
            return self.none_allowed
        return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_COUNT


@dataclass(frozen=True)
class Token:
    """A secret for an HTTP ``Authorization: Bearer`` header (RFC 6750's token characters),
    long enough not to be guessed, or None; never shown in a message."""

    id: str
    MIN_LENGTH = 16
    PATTERN = re.compile(r"[A-Za-z0-9._~+/-]+=*")
    requirement = (f"None or a string of {MIN_LENGTH} characters or more, of letters, digits "
                   "and -._~+/ (such as secrets.token_urlsafe(32))")

    def accepts(self, value):
        return value is None or (isinstance(value, str) and len(value) >= self.MIN_LENGTH
                                 and self.PATTERN.fullmatch(value) is not None)

    def describe(self, value):
        if isinstance(value, str):
            return f"a string of {len(value)} characters (not shown)"
        return f"a {type(value).__name__}"


#: The rule of each ATP_* setting, in atp/conf.py's order (tests/test_checks.py holds
#: every setting to have one).
SETTINGS = {
    "HANDLER_MODULES": ModuleNames("atp.E001"),
    "PICKLE_ENABLED": Flag("atp.E013"),
    "SQLITE_WAL": Flag("atp.E002"),
    "ENGINE": OneOf("atp.E015", ("auto", "orm")),
    "PREPARED_STATEMENTS": Flag("atp.E016"),
    "TRANSACTION_RETRY_SECONDS": Seconds("atp.E003", zero_allowed=True),
    "POLL_INTERVAL_SECONDS": Seconds("atp.E007"),
    "HEARTBEAT_INTERVAL_SECONDS": Seconds("atp.E007"),
    "DAEMON_TIMEOUT_SECONDS": Seconds("atp.E007"),
    "WORKER_KILL_GRACE_SECONDS": Seconds("atp.E007"),
    "SHUTDOWN_TIMEOUT_SECONDS": Seconds("atp.E007"),
    "PROGRESS_INTERVAL_SECONDS": Seconds("atp.E010", zero_allowed=True),
    "TRACEBACK_MAX_CHARS": Count("atp.E009"),
    "DAEMON_RETENTION_SECONDS": Seconds("atp.E007"),
    "MAX_INPUT_BYTES": Count("atp.E012"),
    "MAX_RESPONSE_BYTES": Count("atp.E012"),
    "PURGE_BATCH_SIZE": Count("atp.E004"),
    "MAX_QUEUED_TOTAL": Count("atp.E017", none_allowed=True),
    "SCHEDULE_GRACE_SECONDS": Seconds("atp.E022", zero_allowed=True),
    "UNSEALED_BATCH_SECONDS": Seconds("atp.E023"),
    "METRICS_TOKEN": Token("atp.E025"),
    "METRICS_WINDOW_SECONDS": Seconds("atp.E026"),
}


def _lease_problem(timeout, heartbeat, grace):
    # atp.daemon.lease: a daemon's lease is timeout - grace - heartbeat, renewed at
    # every heartbeat; it must outlast one interval, or it runs out between two
    # heartbeats that both succeed (and NaN here would make a lease that never ends).
    needed = 2 * heartbeat + grace
    if timeout > needed:
        return None
    return (f"ATP_DAEMON_TIMEOUT_SECONDS ({timeout:g}) must exceed two heartbeat intervals "
            f"plus the kill grace ({needed:g}): a daemon's lease, the time-out less the kill "
            "grace and one heartbeat interval, must outlast a heartbeat interval.",
            "A daemon stops its tasks that long before others may restart them; "
            "see docs/daemon.md.")


def _pulse_problem(unsealed, heartbeat):
    # atp.engine.batches: a running block's pulse beats every heartbeat interval; the
    # daemons seal a batch whose pulse they saw stand still this long.
    if unsealed > 2 * heartbeat:
        return None
    return (f"ATP_UNSEALED_BATCH_SECONDS ({unsealed:g}) must exceed two heartbeat intervals "
            f"({2 * heartbeat:g}): a batch block's process shows it lives once an interval, "
            "and the daemons would seal batches whose block still runs.",
            "See docs/queue-features.md#batches.")


@dataclass(frozen=True)
class Relation:
    """A rule between settings: ``problem(*values)`` returns None or (message, hint)."""

    id: str
    names: tuple
    problem: object


#: The rules between settings.
RELATIONS = (
    Relation("atp.E008", ("DAEMON_TIMEOUT_SECONDS", "HEARTBEAT_INTERVAL_SECONDS",
                          "WORKER_KILL_GRACE_SECONDS"), _lease_problem),
    Relation("atp.E024", ("UNSEALED_BATCH_SECONDS", "HEARTBEAT_INTERVAL_SECONDS"),
             _pulse_problem),
)


def is_valid(name):
    """Return whether setting ``ATP_<name>`` passes its own rule."""
    return SETTINGS[name].accepts(getattr(conf, name))


def _shown(value):
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@register(Tags.compatibility)
def check_settings(app_configs=None, **kwargs):
    errors = []
    for name, rule in SETTINGS.items():
        value = getattr(conf, name)
        if not rule.accepts(value):
            shown = getattr(rule, "describe", _shown)(value)
            errors.append(Error(f"ATP_{name} must be {rule.requirement}, not {shown}.", id=rule.id))
    for relation in RELATIONS:
        if all(is_valid(name) for name in relation.names):
            problem = relation.problem(*(getattr(conf, name) for name in relation.names))
            if problem is not None:
                errors.append(Error(problem[0], hint=problem[1], id=relation.id))
    if not settings.USE_TZ:
        errors.append(Error(
            "django-atp needs USE_TZ = True.",
            hint="Task times are read from the database clock and compared as aware "
                 "datetimes; naive ones would be off by the server's UTC offset.",
            id="atp.E011",
        ))
    return errors


@register(Tags.compatibility)
def check_sqlite_transaction_mode(app_configs=None, **kwargs):
    """Warn of SQLite databases whose transactions are deferred (Django 5.1+ has the option)."""
    if django.VERSION < (5, 1):
        return []  # docs/queue.md says what a block needs there
    from atp.engine.databases import database_of

    warnings = []
    for alias in connections:
        if not database_of(alias).needs_immediate_transactions:
            continue
        mode = connections[alias].settings_dict.get("OPTIONS", {}).get("transaction_mode")
        if str(mode).upper() in ("IMMEDIATE", "EXCLUSIVE"):
            continue
        warnings.append(Warning(
            f"SQLite database {alias!r} starts Django's transactions deferred: a "
            "transaction.atomic() block that reads before it writes fails at once with "
            '"database is locked" when another process (a daemon) wrote first.',
            hint=f'Set DATABASES[{alias!r}]["OPTIONS"]["transaction_mode"] = "IMMEDIATE" '
                 '(with a "timeout" such as 20); see docs/queue.md.',
            id="atp.W001",
        ))
    return warnings


@register(Tags.compatibility)
def check_connection_charset(app_configs=None, **kwargs):
    """Warn of MariaDB/MySQL connections whose character set cannot carry every character
    (Django 4.2 connects with the 3-byte "utf8" unless told otherwise)."""
    from atp.engine.databases import database_of

    warnings = []
    for alias in connections:
        narrow = database_of(alias).narrow_charsets
        if not narrow:
            continue
        charset = str(connections[alias].get_connection_params().get("charset", "")).lower()
        if charset not in narrow:
            continue
        warnings.append(Warning(
            f"Database {alias!r} connects with the {charset!r} character set, which has no "
            "characters beyond the Basic Multilingual Plane: a task whose inputs hold one "
            "(an emoji, say) cannot be enqueued.",
            hint=f'Set DATABASES[{alias!r}]["OPTIONS"]["charset"] = "utf8mb4" (Django 5\'s '
                 "default), with tables in utf8mb4.",
            id="atp.W003",
        ))
    return warnings


@register(Tags.compatibility)
def check_metrics_dependency(app_configs=None, **kwargs):
    """Warn of a metrics token set where the metrics page cannot serve (no prometheus-client)."""
    if conf.METRICS_TOKEN is None or importlib.util.find_spec("prometheus_client") is not None:
        return []
    return [Warning(
        "ATP_METRICS_TOKEN is set, but prometheus-client is not installed: atp's metrics "
        "page answers 501.",
        hint="pip install django-atp[metrics]", id="atp.W002",
    )]


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

    if not is_valid("HANDLER_MODULES"):
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
