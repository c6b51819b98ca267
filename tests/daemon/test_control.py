import signal
import time

import psutil
import pytest

import atp
from atp.exceptions import InvalidTransition
from atp.models import Instance, LogRecord
from atp.states import Status
from tests.processes import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def status_of(instance):
    return Instance.objects.get(pk=instance.pk).status


def progress_of(instance):
    return Instance.objects.get(pk=instance.pk).progress_done


def worker_running(daemon):
    """Return the worker process of a one-worker daemon."""
    [worker] = psutil.Process(daemon.pid).children()
    return worker


def test_pausing_suspends_the_worker_and_its_time_out_clock(start_daemon):
    # 2 s of work with a 1.5 s time-out: it only finishes if the pause does not count.
    atp.register_task_type("tests.sleep", "tests.handlers.sleep", timeout=1.5, max_restarts=0)
    task = atp.enqueue("tests.sleep", {"seconds": 1.2, "progress": True})
    daemon = start_daemon("--workers", 1)
    wait_until(lambda: (progress_of(task) or 0) > 2, timeout=30, message="progress")
    atp.pause(task)
    worker = worker_running(daemon)
    wait_until(lambda: worker.status() == psutil.STATUS_STOPPED, timeout=5, message="worker stopped")
    frozen = progress_of(task)
    time.sleep(2)
    assert progress_of(task) == frozen
    assert status_of(task) == Status.PAUSED
    atp.resume(task)
    wait_until(lambda: status_of(task) == Status.FINISHED, timeout=30, message="finished",
               output=daemon.output)
    instance = Instance.objects.get(pk=task.pk)
    assert (instance.attempt, instance.restarts) == (1, 0)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0


def test_cancelling_a_running_task_stops_its_worker_and_the_daemon_goes_on(start_daemon):
    atp.register_task_type("tests.sleep", "tests.handlers.sleep")
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    long = atp.enqueue("tests.sleep", {"seconds": 60}, priority=1)
    daemon = start_daemon("--workers", 1)
    wait_until(lambda: status_of(long) == Status.RUNNING, timeout=30, message="running")
    worker = worker_running(daemon)
    atp.cancel(long, "not needed any more")
    psutil.wait_procs([worker], timeout=5)
    assert not worker.is_running()
    after = atp.enqueue("tests.echo", {"next": True})
    wait_until(lambda: status_of(after) == Status.FINISHED, timeout=30, message="next task")
    assert status_of(long) == Status.CANCELLED
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0


def test_reenqueueing_a_running_task_runs_it_again_as_a_new_attempt(start_daemon):
    atp.register_task_type("tests.sleep", "tests.handlers.sleep")
    task = atp.enqueue("tests.sleep", {"seconds": 1.5})
    daemon = start_daemon("--workers", 1)
    wait_until(lambda: status_of(task) == Status.RUNNING, timeout=30, message="running")
    atp.reenqueue(task)
    wait_until(lambda: status_of(task) == Status.FINISHED, timeout=30, message="finished")
    instance = Instance.objects.get(pk=task.pk)
    assert (instance.attempt, instance.restarts) == (2, 0)
    finished = LogRecord.objects.filter(instance=task, status=Status.FINISHED)
    assert list(finished.values_list("attempt", flat=True)) == [2]
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0


def test_max_concurrency_holds_across_daemons(start_daemon, tmp_path):
    atp.register_task_type("tests.exclusive", "tests.handlers.exclusive_sleep", max_concurrency=1)
    # The tasks share one lock: a second one running at the same time would find it taken.
    inputs = {"directory": str(tmp_path), "seconds": 0.2, "lock": "shared"}
    tasks = atp.enqueue_many("tests.exclusive", [inputs] * 6)
    daemons = [start_daemon("--burst", "--workers", 2) for _ in range(2)]
    for daemon in daemons:
        assert daemon.wait(60) == 0, daemon.output()
    assert list(tmp_path.glob("*.overlap")) == []
    assert {status_of(task) for task in tasks} == {Status.FINISHED}
    assert len((tmp_path / "attempts.log").read_text().splitlines()) == 6


def overlaps(directory):
    return list(directory.glob("*.overlap"))


def ended(instance):
    return status_of(instance) in (Status.FINISHED, Status.FAILED)


def test_a_reenqueued_running_task_runs_again_only_once_its_worker_is_gone(start_daemon, tmp_path):
    atp.register_task_type("tests.exclusive", "tests.handlers.exclusive_sleep")
    task = atp.enqueue("tests.exclusive", {"directory": str(tmp_path), "seconds": 3})
    # A free worker and fast polling: the daemon would claim the task again at once.
    daemon = start_daemon("--workers", 2, "--poll-interval", 0.05)
    wait_until(lambda: status_of(task) == Status.RUNNING, timeout=30, message="running")
    atp.reenqueue(task)
    wait_until(lambda: ended(task), timeout=30, message="ended", output=daemon.output)
    assert overlaps(tmp_path) == [], "both attempts ran at the same time"
    assert status_of(task) == Status.FINISHED
    finished = LogRecord.objects.filter(instance=task, status=Status.FINISHED)
    assert list(finished.values_list("attempt", flat=True)) == [2]
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0


def test_a_cancelled_task_retried_at_once_waits_for_its_worker(start_daemon, tmp_path):
    atp.register_task_type("tests.exclusive", "tests.handlers.exclusive_sleep")
    task = atp.enqueue("tests.exclusive", {"directory": str(tmp_path), "seconds": 3})
    daemon = start_daemon("--workers", 2, "--poll-interval", 0.05)
    wait_until(lambda: status_of(task) == Status.RUNNING, timeout=30, message="running")
    atp.cancel(task)
    atp.reenqueue(task)
    wait_until(lambda: ended(task), timeout=30, message="ended", output=daemon.output)
    assert overlaps(tmp_path) == [], "both attempts ran at the same time"
    assert status_of(task) == Status.FINISHED
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0


def test_processes_a_handler_started_die_with_its_time_out(start_daemon, tmp_path):
    atp.register_task_type("tests.stubborn", "tests.handlers.spawn_stubborn_child",
                           timeout=1, max_restarts=0)
    pid_file = tmp_path / "child.pid"
    task = atp.enqueue("tests.stubborn", {"pid_file": str(pid_file)})
    daemon = start_daemon("--workers", 1)
    wait_until(pid_file.exists, timeout=30, message="child started")
    child = psutil.Process(int(pid_file.read_text()))
    wait_until(lambda: status_of(task) == Status.FAILED, timeout=30, message="timed out",
               output=daemon.output)
    gone, alive = psutil.wait_procs([child], timeout=5)
    assert alive == [], "the handler's child outlived its time-out"
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0


def test_a_running_task_cancelled_and_deleted_does_not_stop_the_daemon(start_daemon):
    atp.register_task_type("tests.sleep", "tests.handlers.sleep")
    doomed = atp.enqueue("tests.sleep", {"seconds": 5, "progress": True})
    daemon = start_daemon("--workers", 1)
    wait_until(lambda: status_of(doomed) == Status.RUNNING, timeout=30, message="running")
    atp.cancel(doomed)
    with pytest.raises(InvalidTransition, match="still stopping its last worker"):
        atp.delete_task(doomed)  # its lease still counts what runs
    Instance.objects.filter(pk=doomed.pk).delete()  # as a careless script would
    after = atp.enqueue("tests.sleep", {"seconds": 0.1})
    wait_until(lambda: status_of(after) == Status.FINISHED, timeout=30, message="next task",
               output=daemon.output)
    assert daemon.process.poll() is None
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0


def test_a_task_stuck_before_its_handler_starts_times_out_from_its_claim():
    """A worker stuck in SCHEDULED (an import that hangs, a lock) is stopped at the time-out."""
    from atp import engine
    from atp.daemon import stopping
    from tests.daemon.test_stopping import FakeWorker, assignment

    atp.register_task_type("tests.quick", "tests.handlers.noop", timeout=0.2)
    daemon = engine.register_daemon()
    queued = atp.enqueue("tests.quick")
    [claimed] = atp.dequeue(daemon)
    workers = [FakeWorker(assignment(claimed.pk, claimed.attempt, timeout=0.2))]
    assert stopping.decide(stopping.observe(workers, daemon), workers) == []
    time.sleep(0.3)
    [decision] = stopping.decide(stopping.observe(workers, daemon), workers)
    assert (decision.action, decision.ending) == (stopping.Action.STOP, stopping.Ending.TIME_OUT)
    assert status_of(queued) == Status.SCHEDULED
