import pytest
from django.core import checks
from django.test import override_settings

from atp import registry
from atp.checks import check_admin_dependencies, check_declared_handlers, check_settings


def ids(errors):
    return [error.id for error in errors]


def test_the_test_settings_pass_every_check():
    assert checks.run_checks() == []


@pytest.mark.parametrize(
    "settings, expected",
    [
        ({"ATP_HANDLER_MODULES": "tests.handlers"}, ["atp.E001"]),
        ({"ATP_HANDLER_MODULES": [42]}, ["atp.E001"]),
        ({"ATP_SQLITE_WAL": "yes"}, ["atp.E002"]),
        ({"ATP_ENGINE": "fast"}, ["atp.E015"]),
        ({"ATP_PREPARED_STATEMENTS": "on"}, ["atp.E016"]),
        ({"ATP_TRANSACTION_RETRY_SECONDS": -1}, ["atp.E003"]),
        ({"ATP_TRANSACTION_RETRY_SECONDS": "30"}, ["atp.E003"]),
        ({"ATP_PURGE_BATCH_SIZE": 0}, ["atp.E004"]),
        ({"ATP_PURGE_BATCH_SIZE": 10.5}, ["atp.E004"]),
        ({"ATP_HEARTBEAT_INTERVAL_SECONDS": 0}, ["atp.E007"]),
        ({"ATP_POLL_INTERVAL_SECONDS": "1"}, ["atp.E007"]),
        ({"ATP_DAEMON_TIMEOUT_SECONDS": 13, "ATP_HEARTBEAT_INTERVAL_SECONDS": 5}, ["atp.E008"]),
        ({"ATP_TRACEBACK_MAX_CHARS": 0}, ["atp.E009"]),
        ({"USE_TZ": False}, ["atp.E011"]),
        ({"ATP_MAX_INPUT_BYTES": 0}, ["atp.E012"]),
        ({"ATP_MAX_RESPONSE_BYTES": "10MB"}, ["atp.E012"]),
        ({"ATP_SCHEDULE_GRACE_SECONDS": -1}, ["atp.E022"]),
        ({"ATP_SCHEDULE_GRACE_SECONDS": "60"}, ["atp.E022"]),
    ],
)
def test_each_bad_setting_has_its_own_error(settings, expected):
    with override_settings(**settings):
        assert ids(check_settings()) == expected


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
