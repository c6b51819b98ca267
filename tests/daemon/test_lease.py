import signal

import pytest
from django.test import override_settings

import atp
from atp.daemon.lease import lease_seconds
from atp.models import Daemon, Instance, LogRecord
from atp.states import Status
from tests.processes import wait_until


@override_settings(
    ATP_DAEMON_TIMEOUT_SECONDS=30, ATP_WORKER_KILL_GRACE_SECONDS=3, ATP_HEARTBEAT_INTERVAL_SECONDS=5
)
def test_the_lease_ends_before_another_daemon_may_reap():
    assert lease_seconds() == 22


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_frozen_daemons_workers_stop_before_its_tasks_run_elsewhere(start_daemon, tmp_path):
    atp.register_task_type("tests.exclusive", "tests.handlers.exclusive_sleep")
    tasks = atp.enqueue_many("tests.exclusive", [{"directory": str(tmp_path), "seconds": 4}] * 2)
    frozen = start_daemon("--workers", 2)
    wait_until(lambda: Instance.objects.filter(status=Status.RUNNING).count() == 2,
               timeout=30, message="both tasks running")
    # Its workers keep running while it is stopped, but their lease runs out.
    frozen.freeze()
    try:
        rescuer = start_daemon("--workers", 2)
        ended = [Status.FINISHED, Status.FAILED]
        wait_until(lambda: Instance.objects.filter(status__in=ended).count() == 2,
                   timeout=60, message="both tasks ended elsewhere")
    finally:
        frozen.signal(signal.SIGCONT)
    assert list(tmp_path.glob("*.overlap")) == [], "a task ran on two daemons at once"
    for task in Instance.objects.filter(pk__in=[t.pk for t in tasks]):
        assert (task.status, task.attempt, task.restarts) == (Status.FINISHED, 2, 1)
        assert LogRecord.objects.filter(
            instance=task, message__startswith=f"daemon {Daemon.objects.get(pid=frozen.pid)} stopped heartbeating"
        ).exists()

    # Thawed, the old daemon learns it was declared dead, registers again and carries on.
    wait_until(lambda: Daemon.objects.filter(pid=frozen.pid, stopped__isnull=True).exists(),
               timeout=30, message="the thawed daemon registered again")
    late = atp.enqueue_many("tests.exclusive", [{"directory": str(tmp_path), "seconds": 0.1}] * 6)
    wait_until(lambda: all(Instance.objects.get(pk=t.pk).status == Status.FINISHED for t in late),
               timeout=60, message="new tasks finished")
    for daemon in (frozen, rescuer):
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(30) == 0, daemon.output()
    assert "was declared dead by another daemon" in frozen.output()
