import os
import socket

import pytest
from django.utils import timezone

from atp import engine
from atp.models import Daemon, Instance, Task
from atp.states import Status
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


def test_a_daemon_records_where_it_runs_on_the_database_clock():
    daemon = engine.register_daemon(workers=4, types=["a", "b"])
    assert (daemon.host, daemon.pid, daemon.workers, daemon.types) == (socket.gethostname(), os.getpid(), 4, "a,b")
    assert abs((daemon.started - timezone.now()).total_seconds()) < 60
    assert daemon.heartbeat == daemon.started or daemon.heartbeat > daemon.started
    assert str(daemon) == f"{socket.gethostname()}:{os.getpid()}"


def test_retiring_a_daemon_hands_back_its_tasks_and_says_how_many(noop_type):
    daemon = engine.register_daemon()
    running = [TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon) for _ in range(2)]
    taken = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)

    engine.cancel(taken)
    assert engine.retire_daemon(daemon) == 2
    for task in Instance.objects.filter(pk__in=[t.pk for t in running]):
        assert (task.status, task.restarts) == (Status.ACCEPTED, 0)
    assert not Task.objects.filter(daemon=daemon).exists()
    assert not Task.objects.filter(pk=taken.pk).exists()


def test_a_daemon_declared_stopped_learns_it_at_its_next_heartbeat(db):
    daemon = engine.register_daemon()
    assert engine.heartbeat(daemon) is True
    engine.reap_daemon(daemon, "silent")
    before = Daemon.objects.get(pk=daemon.pk).heartbeat
    assert engine.heartbeat(daemon) is False
    assert Daemon.objects.get(pk=daemon.pk).heartbeat == before
