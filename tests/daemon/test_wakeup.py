import signal

import pytest
from django.db import transaction

import atp
from atp.engine.notify import QUEUE_CHANNEL
from atp.models import Instance
from atp.states import Status
from tests import pg_sessions
from tests.processes import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LISTEN = f"LISTEN {QUEUE_CHANNEL}"


def test_an_idle_daemon_is_woken_by_a_committed_enqueue(start_daemon):
    """On PostgreSQL by NOTIFY, on SQLite by the doorbell socket."""
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


def test_a_lost_listen_connection_means_polling_until_it_is_back(postgres_only, start_daemon):
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    daemon = start_daemon("--workers", 1, "--poll-interval", 60)
    wait_until(lambda: LISTEN in pg_sessions.queries([daemon]), timeout=30,
               message="listening", output=daemon.output)
    assert pg_sessions.terminate([daemon], query=LISTEN) == 1
    wait_until(lambda: "lost the LISTEN connection" in daemon.output(), timeout=30,
               message="the loss noticed", output=daemon.output)
    wait_until(lambda: LISTEN in pg_sessions.queries([daemon]), timeout=30,
               message="listening again", output=daemon.output)
    task = atp.enqueue("tests.echo")
    wait_until(lambda: Instance.objects.get(pk=task.pk).status == Status.FINISHED,
               timeout=10, message="notified task finished", output=daemon.output)
    assert daemon.process.poll() is None
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0, daemon.output()
