import re
from pathlib import Path

from django.test import override_settings

from atp.conf import AtpSettings, conf

SETTINGS_DOC = Path(__file__).resolve().parent.parent / "docs" / "settings.md"


def declared():
    return [name for name, value in vars(AtpSettings).items() if isinstance(value, property)]


def test_every_setting_is_documented_in_the_same_order():
    documented = re.findall(r"^\| `ATP_(\w+)` \|", SETTINGS_DOC.read_text(), re.M)
    assert documented == declared()


#: Settings whose default is None: no limit, no token.
UNLIMITED_BY_DEFAULT = {"MAX_QUEUED_TOTAL", "METRICS_TOKEN"}


def test_every_setting_has_a_docstring_and_a_default():
    for name in declared():
        assert getattr(AtpSettings, name).__doc__, name
        assert (getattr(conf, name) is not None) != (name in UNLIMITED_BY_DEFAULT), name


def test_settings_are_read_when_used():
    with override_settings(ATP_PURGE_BATCH_SIZE=7):
        assert conf.PURGE_BATCH_SIZE == 7
    assert conf.PURGE_BATCH_SIZE == 500
