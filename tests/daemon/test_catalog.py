"""A daemon runs the types whose handler it has loaded; the others wait for one that has.

The handlers here live in a module the test writes (and rewrites) while daemons run,
as a developer edits a ``tasks.py``.
"""

import importlib
import signal
import sys
import uuid

import pytest
from django.urls import reverse

import atp
from atp.models import Daemon, Instance, LogRecord
from atp.states import Status
from tests.processes import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

VERSION_1 = '''
def work(task, inputs):
    return "version 1"
'''
VERSION_2 = '''
def work(task, inputs):
    return "version 2, with a new handler"


def added(task, inputs):
    return "added while atpd ran"
'''


@pytest.fixture
def handler_module(tmp_path, settings, monkeypatch):
    """Return a function writing a handler module, importable here and in daemons."""
    name = f"handlers_{uuid.uuid4().hex[:8]}"
    monkeypatch.syspath_prepend(str(tmp_path))
    settings.ATP_HANDLER_MODULES = [*settings.ATP_HANDLER_MODULES, name]
    path = tmp_path / f"{name}.py"

    def write(source):
        path.write_text(source)
        importlib.invalidate_caches()
        if name in sys.modules:
            importlib.reload(sys.modules[name])
        else:
            importlib.import_module(name)
        return name

    yield write
    sys.modules.pop(name, None)


def daemon_settings(tmp_path, module):
    return {"PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1",
            "ATP_TEST_MORE_HANDLER_MODULES": module}


def status_of(task):
    return Instance.objects.get(pk=task.pk).status


def test_a_type_whose_handler_a_daemon_has_not_loaded_waits_for_one_that_has(
        start_daemon, tmp_path, handler_module, admin_client):
    module = handler_module(VERSION_1)
    atp.register_task_type("tests.work", f"{module}.work")
    old = start_daemon("--workers", 1, "--poll-interval", 0.1, **daemon_settings(tmp_path, module))
    wait_until(lambda: Daemon.objects.filter(pid=old.pid).exists(), timeout=30,
               message="daemon started", output=old.output)
    handler_module(VERSION_2)  # deployed to the web servers, not yet to the daemon
    atp.register_task_type("tests.added", f"{module}.added")
    task = atp.enqueue("tests.added")
    wait_until(lambda: "does not run type tests.added" in old.output(), timeout=30,
               message="the daemon saw it cannot run it", output=old.output)
    finished = atp.enqueue("tests.work")
    wait_until(lambda: status_of(finished) == Status.FINISHED, timeout=30,
               message="the types it has still run", output=old.output)
    assert status_of(task) == Status.ACCEPTED
    assert list(LogRecord.objects.filter(instance=task).values_list("status", flat=True)) == [
        Status.ACCEPTED]
    page = admin_client.get(reverse("atp:dashboard")).content.decode()
    assert "no live daemon runs this type" in page
    types_page = admin_client.get(reverse("admin:atp_type_changelist")).content.decode()
    assert "no live daemon runs this type" in types_page

    new = start_daemon("--workers", 1, **daemon_settings(tmp_path, module))
    wait_until(lambda: status_of(task) == Status.FINISHED, timeout=30,
               message="run by a daemon with the new code", output=new.output)
    assert atp.get_response(task).text == "added while atpd ran"
    assert "no live daemon runs this type" not in admin_client.get(
        reverse("atp:dashboard")).content.decode()


def test_atpd_reload_restarts_the_daemon_when_its_code_changes(
        start_daemon, tmp_path, handler_module):
    module = handler_module(VERSION_1)
    atp.register_task_type("tests.work", f"{module}.work")
    daemon = start_daemon("--reload", "--workers", 1, "--shutdown-timeout", 5,
                          **daemon_settings(tmp_path, module))
    before = atp.enqueue("tests.work")
    wait_until(lambda: status_of(before) == Status.FINISHED, timeout=30,
               message="first version ran", output=daemon.output)
    assert atp.get_response(before).text == "version 1"

    handler_module(VERSION_2)
    wait_until(lambda: "code changed" in daemon.output(), timeout=30,
               message="the change seen", output=daemon.output)
    atp.register_task_type("tests.added", f"{module}.added")
    after, added = atp.enqueue("tests.work"), atp.enqueue("tests.added")
    wait_until(lambda: status_of(added) == Status.FINISHED, timeout=60,
               message="the new code ran", output=daemon.output)
    assert atp.get_response(after).text == "version 2, with a new handler"
    # Restarted gracefully: the old daemon retired, nothing was restarted.
    assert Daemon.objects.filter(stopped__isnull=True).count() == 1
    assert Instance.objects.filter(restarts__gt=0).count() == 0
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0, daemon.output()
