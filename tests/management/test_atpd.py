import pytest
from django.core.management import CommandError, call_command

from atp.models import Daemon

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "args, message",
    [
        (["--workers", "0"], "argument --workers: must be a positive integer, not '0'"),
        (["--workers", "two"], "argument --workers: must be a positive integer, not 'two'"),
        (["--max-tasks-per-child", "-1"], "must be a positive integer"),
        (["--max-memory-per-child", "1.5"], "must be a positive integer"),
        (["--shutdown-timeout", "-2"], "must be a non-negative number"),
        (["--poll-interval", "0"], "must be a positive number"),
        (["--poll-interval", "nan"], "must be a positive number"),
        (["--types", ","], "must name at least one task type"),
        (["--log-level", "LOUD"], "invalid choice"),
    ],
)
def test_malformed_options_get_a_clear_error_and_change_nothing(args, message):
    with pytest.raises(CommandError, match=message):
        call_command("atpd", *args)
    assert not Daemon.objects.exists()


def test_unknown_types_are_refused_before_anything_runs():
    with pytest.raises(CommandError, match="no task type 'tests.nope' is registered"):
        call_command("atpd", "--types", "tests.nope", "--burst")
    assert not Daemon.objects.exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("reload", [[], ["--reload"]], ids=["atpd", "atpd --reload"])
def test_atpd_refuses_to_start_on_settings_that_fail_the_checks(start_daemon, reload):
    # A NaN heartbeat once passed: the daemon's lease never ran out, and its tasks ran
    # twice at once.
    daemon = start_daemon(*reload, ATP_HEARTBEAT_INTERVAL_SECONDS="nan")
    assert daemon.wait(60) == 1, daemon.output()
    said = daemon.output()
    assert "SystemCheckError" in said
    assert "(atp.E007) ATP_HEARTBEAT_INTERVAL_SECONDS must be a finite number" in said
    assert not Daemon.objects.exists()
