
import psutil
import pytest

import atp
from atp.daemon import suspension
from atp.models import Instance
from atp.states import Status
from tests.processes import wait_until


@pytest.fixture
def stops(monkeypatch):
    """Record the worker stopping itself, instead of stopping the test process."""
    stopped = []
    monkeypatch.setattr(suspension, "_stop", lambda: stopped.append(True))
    return stopped


def test_a_pause_inside_a_write_waits_for_the_write_to_end(stops):
    with suspension.handler_running():
        with suspension.writing():
            suspension._on_request(None, None)
            assert stops == []
        assert stops == [True]


def test_a_pause_outside_writes_stops_at_once_and_between_tasks_not_at_all(stops):
    suspension._on_request(None, None)
    assert stops == []
    with suspension.handler_running():
        suspension._on_request(None, None)
        assert stops == [True]


def test_a_pause_during_the_final_write_after_the_handler_returned_is_ignored(stops):
    with suspension.handler_running():
        pass
    with suspension.writing():  # recording the task's end
        suspension._on_request(None, None)
    assert stops == []


def stopped(worker):
    try:
        return worker.status() == psutil.STATUS_STOPPED
    except psutil.NoSuchProcess:
        raise AssertionError(f"worker pid={worker.pid} died") from None


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_pausing_a_task_that_writes_all_the_time_never_stalls_the_queue(start_daemon):
    atp.register_task_type("tests.busy", "tests.handlers.busy_progress", timeout=600)
    task = atp.enqueue("tests.busy", {"seconds": 300})
    # Progress written as often as it comes, so the worker is nearly always mid-write,
    # and a generous lease: SQLite's one writer lets the heartbeat in only now and then.
    daemon = start_daemon("--workers", 1, ATP_PROGRESS_INTERVAL_SECONDS=0,
                          ATP_DAEMON_TIMEOUT_SECONDS=60, ATP_HEARTBEAT_INTERVAL_SECONDS=1)
    wait_until(lambda: Instance.objects.get(pk=task.pk).status == Status.RUNNING,
               timeout=30, message="running")
    [worker] = psutil.Process(daemon.pid).children()
    for _ in range(8):
        atp.pause(task)
        try:
            wait_until(lambda: stopped(worker), timeout=10, message="worker stopped")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{daemon.output()[-3000:]}") from None
        # While it is stopped, other writers are not held up, the resume included.
        atp.enqueue("tests.busy", {"seconds": 0}, priority=-1)
        atp.resume(task)
        wait_until(lambda: not stopped(worker), timeout=10, message="worker running again")
    atp.cancel(task)
    wait_until(lambda: Instance.objects.filter(status=Status.FINISHED).count() == 8,
               timeout=60, message="the queued tasks ran", output=daemon.output)
    assert Instance.objects.get(pk=task.pk).restarts == 0
