import signal

import psutil
import pytest

import atp
from atp.models import Daemon, Instance, LogRecord, Task
from atp.states import Status
from tests.processes import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def statuses(instances):
    return [Instance.objects.get(pk=instance.pk).status for instance in instances]


def running_count():
    return Instance.objects.filter(status=Status.RUNNING).count()


def handlers_running(count):
    """Return a test that ``count`` handlers run, each having written its first progress.
    RUNNING alone is written by the claim, before a worker has read its task: a stop
    then hands the task back "before it started", unrun."""
    return lambda: Instance.objects.filter(
        status=Status.RUNNING, progress_done__isnull=False).count() == count


def test_burst_runs_what_is_queued_then_exits(start_daemon):
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    atp.register_task_type("tests.ctx", "tests.handlers.log_and_respond")
    echoes = atp.enqueue_many("tests.echo", [{"n": n} for n in range(20)])
    ctx = atp.enqueue("tests.ctx", {"return": {"ok": True}})
    daemon = start_daemon("--burst", "--workers", 2)
    assert daemon.wait(60) == 0, daemon.output()
    assert set(statuses([*echoes, ctx])) == {Status.FINISHED}
    assert atp.get_response(echoes[7]).json() == {"n": 7}
    assert atp.get_response(ctx).json() == {"ok": True}
    assert Task.objects.count() == 0
    assert Daemon.objects.get(pid=daemon.pid).stopped is not None


def test_sigterm_lets_running_tasks_finish_and_leaves_the_queue_alone(start_daemon):
    atp.register_task_type("tests.sleep", "tests.handlers.sleep")
    running = atp.enqueue_many("tests.sleep", [{"seconds": 2, "progress": True}] * 2,
                               priority=1)
    queued = atp.enqueue_many("tests.sleep", [{"seconds": 2}] * 3)
    daemon = start_daemon("--workers", 2)
    wait_until(handlers_running(2), timeout=30, message="two handlers running")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0, daemon.output()
    for instance in Instance.objects.filter(pk__in=[i.pk for i in running]):
        assert (instance.status, instance.attempt, instance.restarts) == (Status.FINISHED, 1, 0)
    for instance in Instance.objects.filter(pk__in=[i.pk for i in queued]):
        assert (instance.status, instance.attempt, instance.restarts) == (Status.ACCEPTED, 0, 0)


def test_tasks_still_running_at_the_shutdown_timeout_go_back_without_a_restart(start_daemon):
    atp.register_task_type("tests.sleep", "tests.handlers.sleep")
    long = atp.enqueue_many("tests.sleep", [{"seconds": 60, "progress": True}] * 2)
    daemon = start_daemon("--workers", 2, "--shutdown-timeout", "0.5")
    wait_until(handlers_running(2), timeout=30, message="two handlers running")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(20) == 0, daemon.output()
    for instance in Instance.objects.filter(pk__in=[i.pk for i in long]):
        assert (instance.status, instance.attempt, instance.restarts) == (Status.ACCEPTED, 1, 0)
        last = LogRecord.objects.filter(instance=instance).last()
        assert last.message == "daemon stopping: shutdown timeout reached"
    assert Task.objects.filter(daemon__isnull=False).count() == 0


def test_a_second_signal_stops_at_once(start_daemon):
    atp.register_task_type("tests.sleep", "tests.handlers.sleep")
    long = atp.enqueue("tests.sleep", {"seconds": 60})
    daemon = start_daemon("--workers", 1, "--shutdown-timeout", 600)
    wait_until(lambda: running_count() == 1, timeout=30, message="task running")
    daemon.signal(signal.SIGTERM)
    daemon.signal(signal.SIGINT)
    assert daemon.wait(20) == 0, daemon.output()
    instance = Instance.objects.get(pk=long.pk)
    assert (instance.status, instance.restarts) == (Status.ACCEPTED, 0)


def test_workers_die_with_a_killed_supervisor(start_daemon):
    atp.register_task_type("tests.sleep", "tests.handlers.sleep")
    atp.enqueue_many("tests.sleep", [{"seconds": 60}] * 2)
    daemon = start_daemon("--workers", 3)
    wait_until(lambda: running_count() == 2, timeout=30, message="two tasks running")
    workers = psutil.Process(daemon.pid).children(recursive=True)
    assert len(workers) >= 3
    daemon.signal(signal.SIGKILL)
    daemon.wait(10)
    gone, alive = psutil.wait_procs(workers, timeout=5)
    assert alive == [], f"orphaned workers: {alive}"


def test_a_daemon_serves_only_its_types_and_skips_paused_ones(start_daemon):
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    atp.register_task_type("tests.noop", "tests.handlers.noop")
    atp.register_task_type("tests.paused", "tests.handlers.noop")
    mine = atp.enqueue("tests.echo")
    other = atp.enqueue("tests.noop")
    paused = atp.enqueue("tests.paused")
    atp.pause_type("tests.paused")
    daemon = start_daemon("--burst", "--types", "tests.echo,tests.paused")
    assert daemon.wait(60) == 0, daemon.output()
    assert statuses([mine, other, paused]) == [Status.FINISHED, Status.ACCEPTED, Status.ACCEPTED]


def test_an_unknown_type_stops_the_daemon_with_a_clear_error(start_daemon):
    daemon = start_daemon("--types", "tests.nope")
    assert daemon.wait(30) != 0
    assert "no task type 'tests.nope' is registered" in daemon.output()


def test_a_served_type_unregistered_mid_run_does_not_stop_the_daemon(start_daemon):
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    daemon = start_daemon("--types", "tests.echo", "--poll-interval", 0.1)
    wait_until(lambda: Daemon.objects.filter(pid=daemon.pid).exists(), timeout=30,
               message="daemon registered")
    # Possibly before the daemon has recorded what it serves (engine/test_daemons.py).
    atp.unregister_task_type("tests.echo")
    wait_until(lambda: "does not run type tests.echo: no task type of that name is registered"
               in daemon.output(), timeout=30, message="error logged", output=daemon.output)
    assert daemon.process.poll() is None
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    task = atp.enqueue("tests.echo")
    wait_until(lambda: Instance.objects.get(pk=task.pk).status == Status.FINISHED, timeout=30,
               message="task finished", output=daemon.output)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0


def is_gone(process):
    """Return whether ``process`` (or pid) exited (a zombie waiting for init to reap it has)."""
    try:
        if not isinstance(process, psutil.Process):
            process = psutil.Process(process)
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("paused", [False, True], ids=["running", "paused"])
def test_processes_a_handler_started_die_with_a_killed_supervisor(start_daemon, tmp_path, paused):
    from tests.processes import wait_for_files

    atp.register_task_type("tests.spawn", "tests.handlers.spawn_sleep")
    pid_file = tmp_path / "sleep.pid"
    task = atp.enqueue("tests.spawn", {"pid_file": str(pid_file)})
    daemon = start_daemon("--workers", 1)
    wait_for_files([pid_file], timeout=30)
    sleeper = psutil.Process(int(pid_file.read_text()))
    if paused:
        atp.pause(task)
        wait_until(lambda: sleeper.status() == psutil.STATUS_STOPPED, timeout=10,
                   message="the handler's process suspended", output=daemon.output)
    daemon.signal(signal.SIGKILL)
    daemon.wait(10)
    wait_until(lambda: is_gone(sleeper), timeout=10,
               message="the handler's child gone with its supervisor")


def test_processes_a_handler_left_running_end_with_its_attempt(start_daemon, tmp_path):
    atp.register_task_type("tests.spawn_and_return", "tests.handlers.spawn_and_return")
    pid_file = tmp_path / "sleep.pid"
    task = atp.enqueue("tests.spawn_and_return", {"pid_file": str(pid_file)})
    daemon = start_daemon("--workers", 1)
    wait_until(lambda: statuses([task]) == [Status.FINISHED], timeout=30, message="finished",
               output=daemon.output)
    pids = [int(pid) for pid in pid_file.read_text().split()]
    wait_until(lambda: all(is_gone(pid) for pid in pids), timeout=10,
               message="what the handler left running gone with its attempt")
    assert daemon.process.poll() is None
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0
