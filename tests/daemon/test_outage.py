import signal
import threading
import time
from contextlib import contextmanager

import pytest
from django.db import OperationalError, connection

import atp
from atp.daemon.outage import CONNECTION_ERRORS, Backoff, retry_while_unreachable
from atp.engine.databases import database_of
from atp.models import Instance, Type
from atp.states import Status
from tests import pg_sessions
from tests.link import Link
from tests.processes import wait_until


def test_backoff_doubles_up_to_its_ceiling():
    backoff = Backoff()
    delays = [backoff.next() for _ in range(8)]
    assert delays[:3] == [0.2, 0.4, 0.8] and delays[-1] == 5.0


def test_retries_last_while_the_database_is_unreachable_and_stop_at_other_errors(monkeypatch):
    monkeypatch.setattr(time, "sleep", lambda seconds: None)
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise OperationalError("server closed the connection unexpectedly")
        return "written"

    assert retry_while_unreachable(flaky, "a write") == "written"
    with pytest.raises(ZeroDivisionError):
        retry_while_unreachable(lambda: 1 / 0, "a bug")


@contextmanager
def database_refusing_connections(seconds, daemons):
    """Refuse new connections to the test database and drop the daemons' ones, for a while."""
    import psycopg

    settings = connection.settings_dict
    admin = psycopg.connect(host=settings["HOST"], port=settings["PORT"] or 5432,
                            user=settings["USER"], dbname="postgres", autocommit=True)
    name = settings["NAME"]
    try:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        pg_sessions.terminate(daemons, database=name, cursor=admin.cursor())
        time.sleep(seconds)
    finally:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        admin.close()
    yield


def finished_count():
    return Instance.objects.filter(status=Status.FINISHED).count()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_killed_connections_do_not_stop_the_daemon_or_lose_a_task(postgres_only, start_daemon):
    atp.register_task_type("tests.sleep", "tests.handlers.sleep")
    tasks = atp.enqueue_many("tests.sleep", [{"seconds": 0.05, "progress": True}] * 300)
    daemon = start_daemon("--workers", 3)
    stop = threading.Event()

    def keep_killing():
        try:
            while not stop.wait(0.7):
                pg_sessions.terminate([daemon])
        finally:
            connection.close()

    wait_until(lambda: finished_count() > 20, timeout=60, message="tasks running")
    killer = threading.Thread(target=keep_killing)
    killer.start()
    try:
        wait_until(lambda: finished_count() == 300, timeout=180, message="all tasks finished")
    finally:
        stop.set()
        killer.join()
    assert daemon.process.poll() is None, "the daemon died"
    assert {i.status for i in Instance.objects.filter(pk__in=[t.pk for t in tasks])} == {Status.FINISHED}
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0, daemon.output()


def ride_out(start_daemon, outage, **settings):
    """Two tasks run and four wait while ``outage(daemon)`` takes the database away for a
    few seconds: the running ones go on, the waiting ones run after, none restarted."""
    atp.register_task_type("tests.sleep", "tests.handlers.sleep")
    first = atp.enqueue_many("tests.sleep", [{"seconds": 2.5}] * 2, priority=1)
    queued = atp.enqueue_many("tests.sleep", [{"seconds": 0.1}] * 4)
    # A lease long enough to outlast the outage: running tasks must not be stopped.
    daemon = start_daemon("--workers", 2, ATP_DAEMON_TIMEOUT_SECONDS=15,
                          ATP_HEARTBEAT_INTERVAL_SECONDS=0.5, **settings)
    wait_until(lambda: Instance.objects.filter(status=Status.RUNNING).count() == 2,
               timeout=30, message="two tasks running", output=daemon.output)
    outage(daemon)
    wait_until(lambda: finished_count() == 6, timeout=60, message="all tasks finished",
               output=daemon.output)
    for instance in Instance.objects.filter(pk__in=[t.pk for t in [*first, *queued]]):
        assert (instance.attempt, instance.restarts) == (1, 0)
    assert "database unavailable" in daemon.output()
    assert "database available again" in daemon.output()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0, daemon.output()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_database_outage_is_ridden_out_by_running_tasks(postgres_only, start_daemon):
    """The server refuses new connections to the database and drops the daemon's."""
    def refuse(daemon):
        with database_refusing_connections(4, [daemon]):
            pass

    ride_out(start_daemon, refuse)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_outage_neither_spins_the_supervisor_nor_churns_workers(postgres_only, start_daemon):
    import psutil

    atp.register_task_type("tests.echo", "tests.handlers.echo")
    daemon = start_daemon("--workers", 3)
    wait_until(lambda: "started: 3 workers" in daemon.output(), timeout=30, message="started")
    supervisor = psutil.Process(daemon.pid)
    before = supervisor.cpu_times()
    with database_refusing_connections(6, [daemon]):
        pass
    used = sum(supervisor.cpu_times()[:2]) - sum(before[:2])
    assert used < 1.5, f"the supervisor used {used:.1f} s of CPU in a 6 s outage"
    assert daemon.output().count("worker pid=") <= 3 + 1, "workers were forked again and again"
    task = atp.enqueue("tests.echo")
    wait_until(lambda: Instance.objects.get(pk=task.pk).status == Status.FINISHED,
               timeout=60, message="runs after the outage", output=daemon.output)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0, daemon.output()


@pytest.fixture
def link():
    """A link to the test's database server that the test can cut (``tests.link``), and
    the URL a daemon connects through it with."""
    if connection.vendor == "sqlite":
        pytest.skip("a database server")
    settings = connection.settings_dict
    scheme = {"postgresql": "postgres"}.get(connection.vendor, connection.vendor)
    opened = Link(settings["HOST"] or "127.0.0.1", settings["PORT"] or
                  {"postgres": 5432, "mysql": 3306}[scheme])
    password = f":{settings['PASSWORD']}" if settings["PASSWORD"] else ""
    opened.url = f"{scheme}://{settings['USER']}{password}@127.0.0.1:{opened.port}/{settings['NAME']}"
    yield opened
    opened.close()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_server_restart_is_ridden_out_by_running_tasks(link, start_daemon):
    """What a daemon sees of its server restarting (MariaDB's, PostgreSQL's): every
    connection dropped at once and new ones refused for seconds."""
    def cut(daemon):
        assert link.connections() > 0, "the daemon connects through the link"
        link.cut(4)

    ride_out(start_daemon, cut, ATP_TEST_DATABASE_URL=link.url)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_connections_dropped_again_and_again_lose_no_task(link, start_daemon):
    atp.register_task_type("tests.sleep", "tests.handlers.sleep")
    tasks = atp.enqueue_many("tests.sleep", [{"seconds": 0.05, "progress": True}] * 200)
    daemon = start_daemon("--workers", 3, ATP_TEST_DATABASE_URL=link.url)
    wait_until(lambda: finished_count() > 20, timeout=60, message="tasks running",
               output=daemon.output)
    drops = 0
    while finished_count() < 200 and drops < 200:
        time.sleep(0.7)
        link.cut(0)
        drops += 1
    wait_until(lambda: finished_count() == 200, timeout=120, message="all tasks finished",
               output=daemon.output)
    assert daemon.process.poll() is None, "the daemon died"
    assert {i.status for i in Instance.objects.filter(pk__in=[t.pk for t in tasks])} == {
        Status.FINISHED}
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0, daemon.output()


@pytest.fixture
def sqlite_only():
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's single write lock")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_write_lock_held_elsewhere_is_waited_out_not_an_outage(sqlite_only, start_daemon):
    import sqlite3

    atp.register_task_type("tests.echo", "tests.handlers.echo")
    daemon = start_daemon("--workers", 1, ATP_DAEMON_TIMEOUT_SECONDS=15)
    wait_until(lambda: "started: 1 workers" in daemon.output(), timeout=30, message="started")
    tasks = atp.enqueue_many("tests.echo", [{}] * 5)
    # Longer than the supervisor waits for a lock in one round (1 s), shorter than its lease.
    other = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    time.sleep(3)
    other.execute("COMMIT")
    other.close()
    wait_until(lambda: finished_count() == 5, timeout=60, message="all tasks finished",
               output=daemon.output)
    assert "database unavailable" not in daemon.output()
    assert "database busy for" not in daemon.output()  # a warning only after 10 s
    assert {i.attempt for i in Instance.objects.filter(pk__in=[t.pk for t in tasks])} == {1}
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0, daemon.output()


# -- a daemon frozen inside a transaction --------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_daemon_session_frozen_in_a_transaction_is_ended_by_the_server(noop_type):
    """A daemon stopped (SIGSTOP, a paused VM) between two statements of a transaction
    holds its locks until it thaws: every other daemon would wait on them. The server ends
    such a session once it has been idle in its transaction for the daemon time-out (the
    daemon is dead by then anyway), and its locks go with it. Here the frozen daemon is a
    session of this process given the daemon's limits, which locks a row and goes quiet."""
    database = database_of(connection.alias)
    if not database.ends_idle_transactions:
        pytest.skip(f"{connection.vendor} has no server to end an idle session")
    frozen = connection.copy()
    try:
        with frozen.cursor() as cursor:
            database.limit_waits(cursor, lock_wait_seconds=1, statement_seconds=30,
                                 idle_in_transaction_seconds=1)
        frozen.set_autocommit(False)
        with frozen.cursor() as cursor:
            cursor.execute(f"SELECT id FROM {Type._meta.db_table} WHERE id = %s FOR UPDATE",
                           [noop_type.pk])
        # Another daemon wants the row: it waits at most 10 s for it (the frozen session
        # would hold it for ever).
        other = connection.copy()
        began = time.monotonic()
        try:
            with other.cursor() as cursor:
                database.limit_waits(cursor, lock_wait_seconds=10, statement_seconds=10,
                                     idle_in_transaction_seconds=30)
                cursor.execute(f"UPDATE {Type._meta.db_table} SET is_paused = is_paused "
                               "WHERE id = %s", [noop_type.pk])
        finally:
            other.close()
        assert time.monotonic() - began < 8, "the frozen session's lock was waited out"
        # Thawed, it finds its session gone: an error the daemon rides out as an outage.
        with pytest.raises(CONNECTION_ERRORS):
            with frozen.cursor() as cursor:
                cursor.execute("SELECT 1")
    finally:
        try:
            frozen.close()
        except CONNECTION_ERRORS:
            pass
