"""Pickled inputs are off unless a project turns them on, and never run as root by default."""

import os
import subprocess
import sys

import pytest
from django.test import override_settings

import atp
from atp import registry
from atp.checks import check_declared_handlers, check_settings
from atp.daemon.catalog import Catalog
from atp.exceptions import InvalidParameter
from atp.models import Type
from atp.serialization import dump_pickle, load_pickle
from tests.processes import PROJECT_ROOT, environment

pytestmark = pytest.mark.django_db

PICKLE_IS_OFF = "pickled inputs are off"


def test_a_pickle_type_is_refused_at_registration_while_pickle_is_off(db, row_counts):
    with pytest.raises(InvalidParameter, match=PICKLE_IS_OFF):
        atp.register_task_type("tests.pickled", "tests.handlers.echo", input_format="pickle")
    atp.register_task_type("tests.plain", "tests.handlers.echo")
    with pytest.raises(InvalidParameter, match=PICKLE_IS_OFF):
        atp.register_task_type("tests.plain", "tests.handlers.echo", input_format="pickle")
    assert not Type.objects.filter(identifier="tests.pickled").exists()
    assert Type.objects.get(identifier="tests.plain").input_format == "json"


def test_a_pickle_type_from_before_takes_no_task_and_runs_none_while_pickle_is_off(db, settings,
                                                                                  row_counts):
    settings.ATP_PICKLE_ENABLED = True
    atp.register_task_type("tests.pickled", "tests.handlers.echo", input_format="pickle")
    token = dump_pickle({"a": 1})
    settings.ATP_PICKLE_ENABLED = False
    before = row_counts()
    with pytest.raises(InvalidParameter, match=PICKLE_IS_OFF):
        atp.enqueue("tests.pickled", {"a": 1})
    assert row_counts() == before
    with pytest.raises(InvalidParameter, match=PICKLE_IS_OFF):
        load_pickle(token)  # nothing is unpickled, even with a good signature
    catalog = Catalog()
    catalog.load(may_import=True)
    assert "tests.pickled" not in catalog.identifiers()
    assert catalog.refused["tests.pickled"] == "its inputs are pickled and ATP_PICKLE_ENABLED is off"


def test_a_declared_pickle_type_is_reported_and_not_registered_while_pickle_is_off(monkeypatch):
    from atp.engine import sync_declared_types

    monkeypatch.setitem(registry._declarations, "tests.declared_pickle", registry.Declaration(
        "tests.declared_pickle", "tests.handlers.echo", {"input_format": "pickle"}))
    [error] = check_declared_handlers()
    assert error.id == "atp.E014" and "'tests.declared_pickle'" in error.msg
    identifiers = [task_type.identifier for task_type in sync_declared_types()]
    assert "tests.declared_pickle" not in identifiers
    assert not Type.objects.filter(identifier="tests.declared_pickle").exists()
    with override_settings(ATP_PICKLE_ENABLED=True):
        assert check_declared_handlers() == []
    with override_settings(ATP_PICKLE_ENABLED="yes"):
        assert [e.id for e in check_settings()] == ["atp.E013"]


def atpd(*args, pickle):
    return subprocess.run(
        [sys.executable, "-m", "django", "atpd", "--burst", "--workers", "1", *args],
        cwd=PROJECT_ROOT, env=environment(ATP_PICKLE_ENABLED="1" if pickle else "0"),
        capture_output=True, text=True, timeout=60,
    )


@pytest.mark.once
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="runs as root only")
@pytest.mark.django_db(transaction=True)
def test_atpd_refuses_to_run_as_root_with_pickle_on_unless_forced():
    refused = atpd(pickle=True)
    assert refused.returncode != 0
    assert "atpd refuses to run as root while ATP_PICKLE_ENABLED is on" in refused.stderr
    forced = atpd("--allow-root", pickle=True)
    assert forced.returncode == 0, forced.stderr
    assert "--allow-root" in forced.stderr
    assert atpd(pickle=False).returncode == 0
