import contextlib
import datetime
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from django.db.models import F
from django.test import override_settings

import atp
from atp import engine
from atp.daemon import maintenance
from atp.liveness import Watch
from atp.models import Daemon, Instance, LogRecord, Task
from atp.states import Status
from tests.factories import TaskFactory
from tests.processes import can_make_namespaces, wait_until

pytestmark = pytest.mark.django_db


def silence(daemon, seconds):
    """Make ``daemon``'s last heartbeat stamp read ``seconds`` old: as after a step of the
    database clock (the server's, or on SQLite the observer's host's) by that much."""
    Daemon.objects.filter(pk=daemon.pk).update(heartbeat=F("heartbeat") - datetime.timedelta(seconds=seconds))


class Clock:
    """The reaper's monotonic clock, moved by hand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@override_settings(ATP_DAEMON_TIMEOUT_SECONDS=30)
def test_a_silent_daemons_tasks_are_restarted_by_another(noop_type):
    me, silent, alive = (engine.register_daemon() for _ in range(3))
    lost = [TaskFactory(type=noop_type, status=s, daemon=silent)
            for s in (Status.SCHEDULED, Status.RUNNING, Status.PAUSED)]
    kept = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=alive)
    clock = Clock()
    watch = Watch(clock)
    assert maintenance.reap_stale_daemons(me, watch) == 0  # seen for the first time
    clock.now += 20
    engine.heartbeat(alive)
    assert maintenance.reap_stale_daemons(me, watch) == 0
    clock.now += 10

    assert maintenance.reap_stale_daemons(me, watch) == 3
    for instance in Instance.objects.filter(pk__in=[t.pk for t in lost]):
        # A paused task stays paused (held) until an operator resumes it.
        expected = Status.PAUSED if instance.pk == lost[2].pk else Status.ACCEPTED
        assert (instance.status, instance.restarts) == (expected, 1)
        last = LogRecord.objects.filter(instance=instance).last()
        assert last.message.startswith(f"daemon {silent} stopped heartbeating; restart 1 of 3")
    assert Instance.objects.get(pk=kept.pk).status == Status.RUNNING
    assert Daemon.objects.get(pk=silent.pk).stopped is not None
    assert not engine.heartbeat(silent)  # a daemon declared dead learns it at once
    clock.now += 60
    assert maintenance.reap_stale_daemons(me, watch) == 1  # alive, silent since
    assert maintenance.reap_stale_daemons(me, watch) == 0


@override_settings(ATP_DAEMON_TIMEOUT_SECONDS=30)
def test_a_daemon_is_judged_by_its_counter_not_by_how_old_its_stamp_looks(noop_type):
    """A step of the database clock makes a live daemon's last heartbeat look a minute
    old: it kept beating, so it keeps its tasks."""
    me, alive = engine.register_daemon(), engine.register_daemon()
    kept = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=alive)
    clock = Clock()
    watch = Watch(clock)
    for _ in range(4):
        engine.heartbeat(alive)
        silence(alive, 60)
        assert maintenance.reap_stale_daemons(me, watch) == 0
        clock.now += 20
    assert Instance.objects.get(pk=kept.pk).status == Status.RUNNING
    assert Daemon.objects.get(pk=alive.pk).stopped is None


@override_settings(ATP_DAEMON_TIMEOUT_SECONDS=30)
def test_a_daemon_never_reaps_itself(noop_type):
    me = engine.register_daemon()
    TaskFactory(type=noop_type, status=Status.RUNNING, daemon=me)
    clock = Clock()
    watch = Watch(clock)
    maintenance.reap_stale_daemons(me, watch)
    clock.now += 60
    assert maintenance.reap_stale_daemons(me, watch) == 0


def test_a_restarted_daemon_restarts_the_tasks_of_its_dead_predecessor_at_once(noop_type):
    gone_pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True).stdout
    predecessor = engine.register_daemon()
    Daemon.objects.filter(pk=predecessor.pk).update(pid=int(gone_pid))
    leftover = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=predecessor)
    sibling = engine.register_daemon()  # this very process: alive
    kept = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=sibling)
    me = engine.register_daemon()

    assert maintenance.reap_gone_daemons_on_this_host(me) == 1
    assert Instance.objects.get(pk=leftover.pk).status == Status.ACCEPTED
    assert Instance.objects.get(pk=kept.pk).status == Status.RUNNING


def test_a_live_daemon_is_not_taken_for_gone_when_the_wall_clock_steps(noop_type, monkeypatch):
    """psutil derives a process's start from the boot time in wall-clock seconds: after
    the clock is stepped, it reads a second off. The boot-time clock does not move."""
    alive = engine.register_daemon()  # this very process
    kept = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=alive)
    stepped = psutil.Process.create_time
    monkeypatch.setattr(psutil.Process, "create_time", lambda self: stepped(self) + 1.0)
    me = engine.register_daemon()
    assert maintenance.reap_gone_daemons_on_this_host(me) == 0
    assert Daemon.objects.get(pk=alive.pk).stopped is None
    assert Instance.objects.get(pk=kept.pk).status == Status.RUNNING


def test_a_daemon_of_this_hosts_previous_boot_is_reaped_at_once(noop_type):
    from atp.daemon.lease import clock

    before_boot = engine.register_daemon()
    Daemon.objects.filter(pk=before_boot.pk).update(
        boot_id="00000000-0000-0000-0000-000000000000",
        heartbeat=F("heartbeat") - datetime.timedelta(seconds=clock() + 60),
    )
    leftover = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=before_boot)
    me = engine.register_daemon()
    assert maintenance.reap_gone_daemons_on_this_host(me) == 1
    last = LogRecord.objects.filter(instance=leftover).last()
    assert "ran before this host rebooted" in last.message


@pytest.mark.parametrize("differs", ["boot id", "PID namespace"])
def test_a_daemon_of_another_machine_with_this_host_name_is_not_reaped(noop_type, caplog, differs):
    twin = engine.register_daemon()  # heartbeating now, elsewhere
    Daemon.objects.filter(pk=twin.pk).update(
        pid=1, **({"boot_id": "another-machine"} if differs == "boot id"
                  else {"pid_namespace": "pid:[1]"}))
    kept = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=twin)
    me = engine.register_daemon()
    assert maintenance.reap_gone_daemons_on_this_host(me) == 0
    assert Instance.objects.get(pk=kept.pk).status == Status.RUNNING
    assert "reports this host's name" in caplog.text


def test_long_stopped_daemons_are_forgotten_once_no_task_records_them(noop_type):
    forgotten, recorded, holding = (engine.register_daemon() for _ in range(3))
    TaskFactory(type=noop_type, status=Status.FINISHED, daemon=recorded)
    TaskFactory(type=noop_type, status=Status.RUNNING, daemon=holding)
    for daemon in (forgotten, recorded, holding):
        Daemon.objects.filter(pk=daemon.pk).update(
            stopped=F("started") - datetime.timedelta(days=8)
        )
    assert maintenance.prune_stopped_daemons() == 1
    assert set(Daemon.objects.values_list("pk", flat=True)) == {recorded.pk, holding.pk}


def still_running(process):
    """Whether a process has not exited (a zombie has: only its parent has not reaped it)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_killed_daemons_tasks_finish_elsewhere_and_never_run_twice_at_once(start_daemon, tmp_path):
    atp.register_task_type("tests.exclusive", "tests.handlers.exclusive_sleep")
    tasks = atp.enqueue_many("tests.exclusive", [{"directory": str(tmp_path), "seconds": 0.15}] * 200)
    doomed = start_daemon("--workers", 3)
    survivor = start_daemon("--workers", 3, ATP_DAEMON_TIMEOUT_SECONDS=4)
    wait_until(lambda: Instance.objects.filter(status=Status.FINISHED).count() >= 50,
               timeout=120, message="50 tasks finished")
    workers = psutil.Process(doomed.pid).children()
    # What the dead daemon still held is read once its workers have exited too (one may
    # complete a task up to the kill), and before the survivor reaps it: the survivor is
    # stopped meanwhile, so that a loaded machine's slow exits cannot let it reap first.
    survivor.freeze()
    doomed.signal(signal.SIGKILL)
    doomed.wait(10)
    wait_until(lambda: not any(map(still_running, workers)), timeout=10, message="workers gone")
    held = set(Task.objects.filter(daemon__pid=doomed.pid).values_list("instance_id", flat=True))
    survivor.signal(signal.SIGCONT)

    wait_until(lambda: Instance.objects.filter(status=Status.FINISHED).count() == 200,
               timeout=180, message="all 200 tasks finished")
    survivor.signal(signal.SIGTERM)
    assert survivor.wait(30) == 0, survivor.output()

    assert list(tmp_path.glob("*.overlap")) == [], "a task ran twice at the same time"
    assert held, "the killed daemon held no task: the test proved nothing"
    restarted = Instance.objects.filter(pk__in=held)
    assert {(i.status, i.restarts) for i in restarted} == {(Status.FINISHED, 1)}
    ran = (tmp_path / "attempts.log").read_text().split("\n")
    assert {int(line.split()[0]) for line in ran if line} == {task.pk for task in tasks}
    assert Daemon.objects.get(pid=doomed.pid).stopped is not None
    assert os.path.exists(tmp_path / "attempts.log")


namespaces = pytest.mark.skipif(not can_make_namespaces(), reason="needs root and unshare")


@pytest.mark.slow
@namespaces
@pytest.mark.django_db(transaction=True)
def test_daemons_on_two_hosts_share_the_queue_and_reap_each_other_only_when_silent(
        start_daemon, tmp_path):
    atp.register_task_type("tests.sleep", "tests.handlers.sleep")
    long = atp.enqueue("tests.sleep", {"seconds": 60})
    host_a = start_daemon("--workers", 1, hostname="atp-host-a")
    wait_until(lambda: Instance.objects.get(pk=long.pk).status == Status.RUNNING, timeout=30,
               message="running on host a", output=host_a.output)
    host_b = start_daemon("--workers", 1, hostname="atp-host-b")
    wait_until(lambda: Daemon.objects.filter(host="atp-host-b").exists(), timeout=30,
               message="host b registered", output=host_b.output)
    time.sleep(3)  # longer than the daemon timeout of the tests: a live one is never reaped
    task = Instance.objects.get(pk=long.pk)
    assert (task.status, task.restarts, task.daemon.host) == (Status.RUNNING, 0, "atp-host-a")
    host_a.signal(signal.SIGKILL)
    wait_until(lambda: Instance.objects.get(pk=long.pk).daemon.host == "atp-host-b", timeout=30,
               message="restarted on host b", output=host_b.output)
    assert Instance.objects.get(pk=long.pk).restarts == 1


@pytest.mark.slow
@namespaces
@pytest.mark.django_db(transaction=True)
def test_two_containers_with_one_host_name_do_not_reap_each_other(
        start_daemon, tmp_path):
    """Containers on a host's network share its name, and each sees its own pids."""
    atp.register_task_type("tests.sleep", "tests.handlers.sleep")
    long = atp.enqueue("tests.sleep", {"seconds": 60})
    first = start_daemon("--workers", 1, hostname="atp-twin", own_pid_namespace=True)
    wait_until(lambda: Instance.objects.get(pk=long.pk).status == Status.RUNNING, timeout=30,
               message="running in the first container", output=first.output)
    time.sleep(1.5)  # the second one starts at another tick (and second) of the clock
    second = start_daemon("--workers", 1, hostname="atp-twin", own_pid_namespace=True)
    wait_until(lambda: "reports this host's name (atp-twin)" in second.output(), timeout=30,
               message="the twin noticed", output=second.output)
    task = Instance.objects.get(pk=long.pk)
    assert (task.status, task.attempt, task.restarts) == (Status.RUNNING, 1, 0)
    assert Daemon.objects.filter(host="atp-twin", stopped__isnull=True).count() == 2


@pytest.fixture
def clock_step(tmp_path):
    """A wall-clock step for a daemon this test starts (tests/clockstep)."""
    from tests import clockstep

    try:
        return clockstep.build(tmp_path)
    except FileNotFoundError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"the clock-step test must run in CI: {exc}")
        pytest.skip(str(exc))


class LagTrigger:
    """The statement that makes (or, ``drop``, removes) a trigger stamping one daemon's
    heartbeats ``seconds`` behind the server's clock, in the server's own dialect: it is
    compiled like a query expression, so Django picks its ``as_<database>`` method."""

    def __init__(self, daemon_pk, seconds, *, drop=False):
        self.daemon_pk, self.seconds, self.drop = int(daemon_pk), int(seconds), drop

    def as_sql(self, compiler, connection):
        raise NotImplementedError(f"no heartbeat trigger for {connection.display_name}")

    def as_postgresql(self, compiler, connection):
        if self.drop:
            return "DROP TRIGGER atp_test_lag ON atp_daemon; DROP FUNCTION atp_test_lag();", []
        return f"""
            CREATE FUNCTION atp_test_lag() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN NEW.heartbeat := NEW.heartbeat - interval '{self.seconds} seconds'; RETURN NEW; END $$;
            CREATE TRIGGER atp_test_lag BEFORE UPDATE ON atp_daemon FOR EACH ROW
            WHEN (NEW.id = {self.daemon_pk}) EXECUTE FUNCTION atp_test_lag();
        """, []

    def as_mysql(self, compiler, connection):
        if self.drop:
            return "DROP TRIGGER atp_test_lag", []
        return f"""
            CREATE TRIGGER atp_test_lag BEFORE UPDATE ON atp_daemon FOR EACH ROW
            SET NEW.heartbeat = IF(NEW.id = {self.daemon_pk},
                                   NEW.heartbeat - INTERVAL {self.seconds} SECOND, NEW.heartbeat)
        """, []


@contextlib.contextmanager
def heartbeat_stamps_lagging(daemon_pk, seconds):
    """Stamp every heartbeat of one daemon ``seconds`` behind the server's clock, as if the
    server's clock stepped forward by that much after each of them (a database server)."""
    from django.db import connection
    from django.db.models.sql import Query

    def run(statement):
        sql, _ = Query(None).get_compiler(connection=connection).compile(statement)
        with connection.cursor() as cursor:
            cursor.execute(sql)  # no parameters: PostgreSQL's two statements in one

    run(LagTrigger(daemon_pk, seconds))
    try:
        yield
    finally:
        run(LagTrigger(daemon_pk, seconds, drop=True))


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_wall_clock_step_makes_no_daemon_reap_a_live_neighbour(start_daemon, tmp_path, clock_step):
    """One daemon's clock steps a minute forward while its neighbour runs two tasks: on
    SQLite its host's wall clock (the database clock there), on a server the server's
    as that daemon reads it against the neighbour's stamps. Nobody is declared dead and
    no attempt starts while the first still runs."""
    from django.db import connection

    atp.register_task_type("tests.exclusive_sleep", "tests.handlers.exclusive_sleep")
    busy = start_daemon("--workers", 2)
    tasks = atp.enqueue_many("tests.exclusive_sleep", [{"directory": str(tmp_path), "seconds": 8}] * 2)
    wait_until(lambda: Instance.objects.filter(status=Status.RUNNING).count() == 2, timeout=30,
               message="both tasks running", output=busy.output)
    busy_pk = Daemon.objects.get(pid=busy.pid, stopped__isnull=True).pk
    stepped = start_daemon("--workers", 1, **clock_step.environment)
    wait_until(lambda: "started: 1 workers" in stepped.output(), timeout=30, message="started",
               output=stepped.output)
    if connection.vendor == "sqlite":
        clock_step.step(60)
        lagging = contextlib.nullcontext()
    else:
        lagging = heartbeat_stamps_lagging(busy_pk, 60)
    with lagging:
        wait_until(lambda: Instance.objects.filter(status=Status.FINISHED).count() == 2,
                   timeout=60, message="both tasks finished", output=stepped.output)
    for instance in Instance.objects.filter(pk__in=[t.pk for t in tasks]):
        assert (instance.attempt, instance.restarts) == (1, 0), stepped.output()
    assert not list(tmp_path.glob("*.overlap")), "a task ran twice at once"
    assert "declared dead" not in stepped.output()
    assert Daemon.objects.get(pk=busy_pk).stopped is None
    for daemon in (busy, stepped):
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(30) == 0, daemon.output()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_daemon_purges_all_that_is_due_not_a_batch_per_round(start_daemon):
    """Retention keeps pace with what ends: a daemon purges batch after batch while tasks
    are due, each its own short transaction, not one batch per maintenance round (an
    hour's worth of ended tasks at 400 a second took a daemon an hour to purge)."""
    atp.register_task_type("tests.brief", "tests.handlers.noop", retention=1)
    tasks = atp.enqueue_many("tests.brief", [{}] * 1000)
    # Maintenance rounds a minute apart: the first, at the start, finds them all due; the
    # next would come only after the test.
    slow_rounds = {"ATP_HEARTBEAT_INTERVAL_SECONDS": 60, "ATP_DAEMON_TIMEOUT_SECONDS": 300,
                   "ATP_PURGE_BATCH_SIZE": 100}
    burst = start_daemon("--burst", "--workers", 2, **slow_rounds)
    assert burst.wait(120) == 0, burst.output()
    assert Instance.objects.filter(status=Status.FINISHED).count() == 1000
    time.sleep(1.1)  # past their retention
    daemon = start_daemon("--workers", 1, **slow_rounds)
    wait_until(lambda: not Instance.objects.filter(pk__in=[t.pk for t in tasks]).exists(),
               timeout=30, message="every ended task purged", output=daemon.output)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0, daemon.output()
