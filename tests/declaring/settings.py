"""The test settings with the ``tests.declaring`` app installed."""

from tests.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.declaring"]  # noqa: F405
