import os
import socket

import pytest
from django.utils import timezone

from atp import engine

pytestmark = pytest.mark.django_db


def test_a_daemon_records_where_it_runs_on_the_database_clock():
    daemon = engine.register_daemon(workers=4, types=["a", "b"])
    assert (daemon.host, daemon.pid, daemon.workers, daemon.types) == (socket.gethostname(), os.getpid(), 4, "a,b")
    assert abs((daemon.started - timezone.now()).total_seconds()) < 60
    assert daemon.heartbeat == daemon.started or daemon.heartbeat > daemon.started
    assert str(daemon) == f"{socket.gethostname()}:{os.getpid()}"
