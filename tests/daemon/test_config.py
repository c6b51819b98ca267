import pytest
from django.test import override_settings

from atp.daemon.config import DaemonConfig, default_workers
from atp.exceptions import InvalidParameter


def test_defaults_come_from_settings_and_the_machine():
    with override_settings(ATP_SHUTDOWN_TIMEOUT_SECONDS=12, ATP_POLL_INTERVAL_SECONDS=0.5):
        config = DaemonConfig(workers=default_workers())
    assert (config.shutdown_timeout, config.poll_interval) == (12, 0.5)
    assert config.workers >= 1 and config.types is None


@pytest.mark.parametrize(
    "options, message",
    [
        ({"workers": 0}, "workers must be a positive integer"),
        ({"workers": 2, "max_tasks_per_child": 0}, "max_tasks_per_child"),
        ({"workers": 2, "shutdown_timeout": -1}, "shutdown_timeout must not be negative"),
        ({"workers": 2, "poll_interval": 0}, "poll_interval must be positive"),
        ({"workers": 2, "types": (" ",)}, "at least one task type"),
    ],
)
def test_bad_options_are_refused(options, message):
    with pytest.raises(InvalidParameter, match=message):
        DaemonConfig(**options)
