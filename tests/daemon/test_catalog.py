"""A daemon runs the types whose handler it has loaded; the others wait for one that has.

The handlers here live in a module the test writes (and rewrites) while daemons run,
as a developer edits a ``tasks.py``.
"""

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


def status_of(task):
    return Instance.objects.get(pk=task.pk).status


def test_a_type_whose_handler_a_daemon_has_not_loaded_waits_for_one_that_has(
        start_daemon, handler_module, admin_client):
    module = handler_module(VERSION_1)
    atp.register_task_type("tests.work", f"{module}.work")
    old = start_daemon("--workers", 1, "--poll-interval", 0.1, **handler_module.daemon_settings())
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

    new = start_daemon("--workers", 1, **handler_module.daemon_settings())
    wait_until(lambda: status_of(task) == Status.FINISHED, timeout=30,
               message="run by a daemon with the new code", output=new.output)
    assert atp.get_response(task).text == "added while atpd ran"
    assert "no live daemon runs this type" not in admin_client.get(
        reverse("atp:dashboard")).content.decode()
