import signal

import pytest
from django.db import transaction

import atp
from atp.models import Instance
from atp.states import Status
from tests.processes import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_an_idle_daemon_is_woken_by_a_committed_enqueue(postgres_only, start_daemon):
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    warm_up = atp.enqueue("tests.echo")
    # Polling every 60 s: only a notification can start the next task soon.
    daemon = start_daemon("--workers", 1, "--poll-interval", 60)
    wait_until(lambda: Instance.objects.get(pk=warm_up.pk).status == Status.FINISHED,
               timeout=30, message="first task finished")
    with transaction.atomic():
        task = atp.enqueue("tests.echo")
    wait_until(lambda: Instance.objects.get(pk=task.pk).status == Status.FINISHED,
               timeout=10, message="notified task finished")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0, daemon.output()
