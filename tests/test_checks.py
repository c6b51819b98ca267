import math
import re
import subprocess
import sys

import django
import pytest
from django.core import checks
from django.db.utils import ConnectionHandler
from django.test import override_settings

from atp import checks as atp_checks
from atp import registry
from atp.checks import (
    MAX_COUNT,
    MAX_SECONDS,
    check_admin_dependencies,
    check_connection_charset,
    check_declared_handlers,
    check_settings,
    check_sqlite_transaction_mode,
)
from atp.engine import databases as databases_module
from atp.engine.databases import database_of
from tests.processes import PROJECT_ROOT, environment
from tests.test_conf import SETTINGS_DOC, declared

NAN, INF = math.nan, math.inf


def ids(errors):
    return [error.id for error in errors]


def test_the_test_settings_pass_every_check():
    # The suite runs on Django's default (deferred) SQLite transactions on purpose: an
    # enqueue must not need immediate ones. So atp.W001 is silenced in tests/settings.py.
    reported = checks.run_checks()
    assert [message for message in reported if not message.is_silenced()] == []
    assert {message.id for message in reported} <= {"atp.W001"}


def test_the_models_pass_every_check_on_the_test_database(db):
    """Django's model checks for the database itself (``--database``): on MariaDB/MySQL,
    which have no conditional indexes or constraints, nothing is left to silence
    (``ConditionalIndexes``; the consumers' unique names hold without a condition)."""
    reported = checks.run_checks(databases=["default"])
    assert [message for message in reported if not message.is_silenced()] == []


#: The kind of every setting and the id of its check, as docs/settings.md says.
KINDS = {
    "HANDLER_MODULES": ("module names", "atp.E001"),
    "PICKLE_ENABLED": ("flag", "atp.E013"),
    "SQLITE_WAL": ("flag", "atp.E002"),
    "ENGINE": ("engine", "atp.E015"),
    "PREPARED_STATEMENTS": ("flag", "atp.E016"),
    "TRANSACTION_RETRY_SECONDS": ("seconds or 0", "atp.E003"),
    "POLL_INTERVAL_SECONDS": ("seconds", "atp.E007"),
    "HEARTBEAT_INTERVAL_SECONDS": ("seconds", "atp.E007"),
    "DAEMON_TIMEOUT_SECONDS": ("seconds", "atp.E007"),
    "WORKER_KILL_GRACE_SECONDS": ("seconds", "atp.E007"),
    "SHUTDOWN_TIMEOUT_SECONDS": ("seconds", "atp.E007"),
    "PROGRESS_INTERVAL_SECONDS": ("seconds or 0", "atp.E010"),
    "TRACEBACK_MAX_CHARS": ("count", "atp.E009"),
    "DAEMON_RETENTION_SECONDS": ("seconds", "atp.E007"),
    "MAX_INPUT_BYTES": ("count", "atp.E012"),
    "MAX_RESPONSE_BYTES": ("count", "atp.E012"),
    "PURGE_BATCH_SIZE": ("count", "atp.E004"),
    "MAX_QUEUED_TOTAL": ("count or None", "atp.E017"),
    "SCHEDULE_GRACE_SECONDS": ("seconds or 0", "atp.E022"),
    "UNSEALED_BATCH_SECONDS": ("seconds", "atp.E023"),
    "METRICS_TOKEN": ("token", "atp.E025"),
    "METRICS_WINDOW_SECONDS": ("seconds", "atp.E026"),
}

#: What no number setting takes: not finite, negative, text, a bool (an int to Python!).
NOT_A_NUMBER = [NAN, INF, -INF, -1, -0.5, "5", b"5", True, False, [5]]
BAD = {
    "seconds": [*NOT_A_NUMBER, None, 0, 0.0, MAX_SECONDS + 1],
    "seconds or 0": [*NOT_A_NUMBER, None, MAX_SECONDS + 1],
    "count": [*NOT_A_NUMBER, None, 0, 5.0, 10.5, MAX_COUNT + 1],
    "count or None": [*NOT_A_NUMBER, 0, 5.0, MAX_COUNT + 1],
    "flag": ["yes", "True", 1, 0, None, NAN],
    "engine": ["fast", "AUTO", None, 1, True, ["auto"]],
    "module names": ["tests.handlers", b"tests.handlers", [42], ["tests handlers"], [""],
                     ["tests..handlers"], ("tests.handlers", None), None, True],
    "token": ["", "too-short-token", "a token with spaces in it", "t\u00f6ken-t\u00f6ken-t\u00f6ken",
              "x" * 20 + "\n", b"0123456789abcdef0123", 12345678901234567890, True],
}
GOOD = {
    "seconds": [0.001, 7, 12.5],
    "seconds or 0": [0, 0.0, 0.001, 7, MAX_SECONDS],
    "count": [1, 7, MAX_COUNT],
    "count or None": [None, 1, MAX_COUNT],
    "flag": [True, False],
    "engine": ["auto", "orm"],
    "module names": [[], ["tests.handlers"], ("tests.handlers", "tests.djangotasks")],
    "token": [None, "0123456789abcdef", "Zm9vYmFyYmF6cXV4cXV1eA==", "a-b_c.d~e+f/g0123"],
}
#: Kinds of settings that hold a secret: their errors never show the value.
SECRET_KINDS = {"token"}


def cases(values_of_kind):
    return [pytest.param(name, value, expected_id, id=f"{name}={value!r}")
            for name, (kind, expected_id) in KINDS.items()
            for value in values_of_kind[kind]]


def test_every_setting_of_conf_has_a_kind_here():
    assert list(KINDS) == declared()


@pytest.mark.parametrize("name, value, expected_id", cases(BAD))
def test_each_bad_value_of_each_setting_has_its_error(name, value, expected_id):
    with override_settings(**{f"ATP_{name}": value}):
        errors = check_settings()
    assert ids(errors) == [expected_id]
    assert errors[0].msg.startswith(f"ATP_{name} must be ")
    if KINDS[name][0] in SECRET_KINDS:
        assert repr(value) not in errors[0].msg
    else:
        assert errors[0].msg.endswith(f", not {value!r}.")


@pytest.mark.parametrize("name, value, expected_id", cases(GOOD))
def test_good_values_pass(name, value, expected_id):
    with override_settings(**{f"ATP_{name}": value}):
        assert expected_id not in ids(check_settings())


@pytest.mark.parametrize("name", declared())
def test_every_setting_is_checked(name):
    """A setting added to atp/conf.py without a rule in atp.checks.SETTINGS fails here."""
    with override_settings(**{f"ATP_{name}": object()}):
        errors = check_settings()
    assert [error.msg.split()[0] for error in errors] == [f"ATP_{name}"]


def test_the_rules_follow_conf_and_the_docs_name_their_ids():
    assert list(atp_checks.SETTINGS) == declared()
    rows = re.findall(r"^\| `ATP_(\w+)` \|.*\| ([^|]*) \|$", SETTINGS_DOC.read_text(), re.M)
    documented = {name: set(re.findall(r"atp\.[EW]\d+", column)) for name, column in rows}
    for name, rule in atp_checks.SETTINGS.items():
        relations = {r.id for r in atp_checks.RELATIONS if name in r.names}
        assert {rule.id, *relations} <= documented[name], name


@pytest.mark.parametrize(
    "timings",
    [
        {"DAEMON_TIMEOUT_SECONDS": 13, "HEARTBEAT_INTERVAL_SECONDS": 5},
        {"DAEMON_TIMEOUT_SECONDS": 13, "HEARTBEAT_INTERVAL_SECONDS": 5,
         "WORKER_KILL_GRACE_SECONDS": 3},  # a lease of exactly one interval
        {"DAEMON_TIMEOUT_SECONDS": 2, "HEARTBEAT_INTERVAL_SECONDS": 0.2,
         "WORKER_KILL_GRACE_SECONDS": 1.7},
        # (Batch blocks then have no time to show they live either: atp.E024 as well.)
        {"HEARTBEAT_INTERVAL_SECONDS": MAX_SECONDS},
    ],
)
def test_a_daemon_timeout_that_leaves_no_lease_is_refused(timings):
    with override_settings(**{f"ATP_{name}": value for name, value in timings.items()}):
        errors = [error for error in check_settings() if error.id != "atp.E024"]
    assert ids(errors) == ["atp.E008"]
    assert "lease" in errors[0].msg


def test_the_relation_waits_for_its_settings_to_be_valid():
    # A NaN heartbeat made a lease that never ran out, and the comparison passed.
    for timings in ({"HEARTBEAT_INTERVAL_SECONDS": NAN}, {"DAEMON_TIMEOUT_SECONDS": INF},
                    {"WORKER_KILL_GRACE_SECONDS": -INF}):
        with override_settings(**{f"ATP_{name}": value for name, value in timings.items()}):
            assert ids(check_settings()) == ["atp.E007"]


@pytest.mark.parametrize("unsealed, heartbeat", [(10, 5), (1, 5), (0.4, 0.2)])
def test_a_batch_block_must_have_time_to_show_it_lives(unsealed, heartbeat):
    with override_settings(ATP_UNSEALED_BATCH_SECONDS=unsealed,
                           ATP_HEARTBEAT_INTERVAL_SECONDS=heartbeat,
                           ATP_DAEMON_TIMEOUT_SECONDS=30 * heartbeat):
        errors = check_settings()
    assert ids(errors) == ["atp.E024"]
    assert "heartbeat" in errors[0].msg


def test_test_timers_leave_a_lease():
    with override_settings(ATP_DAEMON_TIMEOUT_SECONDS=2.0, ATP_HEARTBEAT_INTERVAL_SECONDS=0.2,
                           ATP_WORKER_KILL_GRACE_SECONDS=0.5):
        assert check_settings() == []


def test_a_handler_modules_string_neither_breaks_start_up_nor_allows_anything():
    with override_settings(ATP_HANDLER_MODULES="tests.handlers"):
        registry.autodiscover()  # it imported "t", "e", "s"... and failed
        assert not registry.is_allowed_module("s")
        assert not registry.is_allowed_module("tests.handlers")
        assert check_declared_handlers() == []  # atp.E001 says what is wrong


@pytest.mark.slow
def test_manage_py_check_reports_a_handler_modules_string(tmp_path):
    (tmp_path / "string_modules.py").write_text(
        'from tests.settings import *  # noqa\nATP_HANDLER_MODULES = "tests.handlers"\n')
    env = environment(DJANGO_SETTINGS_MODULE="string_modules",
                      PYTHONPATH=f"{tmp_path}:{PROJECT_ROOT}")
    done = subprocess.run([sys.executable, "-m", "django", "check"], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "(atp.E001) ATP_HANDLER_MODULES must be a list of dotted module names" in done.stderr
    assert "No module named" not in done.stderr


def databases(**options_of):
    """Return real connection handlers (no connection is made) for these databases."""
    engines_of = {"sqlite": "django.db.backends.sqlite3",
                  "postgresql": "django.db.backends.postgresql",
                  "mysql": "django.db.backends.mysql"}
    return ConnectionHandler({
        alias: {"ENGINE": engines_of[kind], "NAME": f"{alias}.db", "OPTIONS": options}
        for alias, (kind, options) in options_of.items()
    })


def test_sqlite_without_immediate_transactions_is_warned_of_from_django_5_1(monkeypatch):
    handler = databases(
        default=("sqlite", {"timeout": 20}),
        immediate=("sqlite", {"transaction_mode": "IMMEDIATE"}),
        lowercase=("sqlite", {"transaction_mode": "immediate"}),
        exclusive=("sqlite", {"transaction_mode": "EXCLUSIVE"}),
        deferred=("sqlite", {"transaction_mode": "DEFERRED"}),
        server=("postgresql", {}),
    )
    monkeypatch.setattr(atp_checks, "connections", handler)
    monkeypatch.setattr(databases_module, "connections", handler)
    warnings = check_sqlite_transaction_mode()
    if django.VERSION < (5, 1):  # no transaction_mode to set: docs/queue.md says what to do
        assert warnings == []
        return
    assert ids(warnings) == ["atp.W001", "atp.W001"]
    assert [w.level for w in warnings] == [checks.WARNING] * 2
    assert "'default'" in warnings[0].msg and "'deferred'" in warnings[1].msg
    assert '"transaction_mode"] = "IMMEDIATE"' in warnings[0].hint


def test_a_mysql_connection_in_3_byte_utf8_is_warned_of(monkeypatch):
    pytest.importorskip("MySQLdb", reason="the mysql extra (make mysql-driver)")
    handler = databases(
        narrow=("mysql", {"charset": "utf8"}), mb3=("mysql", {"charset": "utf8mb3"}),
        wide=("mysql", {"charset": "utf8mb4"}), server=("postgresql", {}),
        default=("sqlite", {}),
        # Django 4.2 connects in "utf8" unless told otherwise, Django 5 in "utf8mb4".
        unset=("mysql", {}),
    )
    monkeypatch.setattr(atp_checks, "connections", handler)
    monkeypatch.setattr(databases_module, "connections", handler)
    warnings = check_connection_charset()
    flagged = ["'narrow'", "'mb3'"] + (["'unset'"] if django.VERSION < (5, 0) else [])
    assert ids(warnings) == ["atp.W003"] * len(flagged)
    assert [next(alias for alias in flagged if alias in w.msg) for w in warnings] == flagged
    assert '["charset"] = "utf8mb4"' in warnings[0].hint


def test_the_test_databases_carry_every_character():
    assert check_connection_charset() == []


def test_the_sqlite_warning_concerns_the_test_database_alone(monkeypatch):
    expected = (["atp.W001"] if django.VERSION >= (5, 1)
                and database_of("default").needs_immediate_transactions else [])
    assert ids(check_sqlite_transaction_mode()) == expected


def test_the_admin_needs_the_dropdown_filter_app():
    from django.apps import apps

    installed = [app for app in apps.app_configs if app != "django_admin_listfilter_dropdown"]
    with override_settings(INSTALLED_APPS=[apps.app_configs[app].name for app in installed]):
        assert ids(check_admin_dependencies()) == ["atp.E005"]


def test_a_declared_handler_outside_allowed_modules_is_reported(monkeypatch):
    monkeypatch.setitem(
        registry._declarations, "tests.rogue",
        registry.Declaration("tests.rogue", "os.system", {}),
    )
    errors = check_declared_handlers()
    assert ids(errors) == ["atp.E006"]
    assert "'tests.rogue'" in errors[0].msg


def test_a_metrics_token_without_prometheus_client_is_warned_of(monkeypatch, settings):
    # The package is installed here (the dev extra): its absence is what find_spec says.
    import importlib.util

    assert atp_checks.check_metrics_dependency() == []
    settings.ATP_METRICS_TOKEN = "0123456789abcdef0123"
    assert atp_checks.check_metrics_dependency() == []
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "prometheus_client" else real(name, *a))
    assert ids(atp_checks.check_metrics_dependency()) == ["atp.W002"]
