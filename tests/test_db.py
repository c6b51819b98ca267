import logging
import signal
import sqlite3
import threading
import time

import pytest
from django.db import OperationalError, connection, transaction
from django.db.models.functions import Now
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

import atp
from atp.db import run_in_transaction
from atp.models import Instance, Type

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sqlite_only():
    if connection.vendor != "sqlite":
        pytest.skip("SQLite behaviour")


def hold_write_lock(seconds):
    """Take SQLite's write lock from another connection for ``seconds``; return the thread."""
    other = sqlite3.connect(connection.settings_dict["NAME"], check_same_thread=False)
    other.isolation_level = None
    other.execute("BEGIN IMMEDIATE")
    other.execute("UPDATE atp_type SET description = 'locked' WHERE 0")

    def release():
        time.sleep(seconds)
        other.execute("COMMIT")
        other.close()

    thread = threading.Thread(target=release)
    thread.start()
    return thread


@pytest.fixture
def short_busy_timeout(sqlite_only):
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout = 50")
    yield
    connection.close()


def test_sqlite_databases_are_switched_to_write_ahead_logging(sqlite_only):
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0] == "wal"


def test_queue_writes_open_immediate_transactions_on_sqlite(sqlite_only, noop_type):
    with CaptureQueriesContext(connection) as queries:
        atp.enqueue("tests.noop")
    assert "BEGIN IMMEDIATE" in [query["sql"] for query in queries.captured_queries]


def test_a_locked_sqlite_database_is_waited_out_not_reported(short_busy_timeout, noop_type, caplog):
    holder = hold_write_lock(0.5)
    # Django's own writes fail at once once the busy timeout has passed ...
    with pytest.raises(OperationalError, match="database is locked"):
        Type.objects.filter(pk=noop_type.pk).update(description="plain write")
    # ... while a queue write retries until the lock is free.
    with caplog.at_level(logging.DEBUG, logger="atp.db"):
        instance = atp.enqueue("tests.noop")
    holder.join()
    assert Instance.objects.filter(pk=instance.pk).exists()
    assert "database busy" in caplog.text


@override_settings(ATP_TRANSACTION_RETRY_SECONDS=0.2)
def test_a_queue_write_gives_up_after_the_retry_time_and_writes_nothing(short_busy_timeout, noop_type):
    holder = hold_write_lock(1.5)
    with pytest.raises(OperationalError, match="database is locked"):
        atp.enqueue("tests.noop")
    holder.join()
    assert not Instance.objects.exists()


def test_a_deadlocked_queue_write_is_retried(postgres_only, noop_type):
    import psycopg

    first, second = atp.enqueue("tests.noop"), atp.enqueue("tests.noop")
    settings = connection.settings_dict
    other = psycopg.connect(
        host=settings["HOST"], port=settings["PORT"] or 5432, user=settings["USER"],
        dbname=settings["NAME"],
    )
    # The other session waits longer before checking for deadlocks, so the server
    # picks the queue write as the victim.
    other.execute("SET deadlock_timeout = '10s'")
    other.execute("UPDATE atp_instance SET priority = 1 WHERE id = %s", [second.pk])
    attempts = []

    def other_takes_first():
        other.execute("UPDATE atp_instance SET priority = 1 WHERE id = %s", [first.pk])
        other.commit()

    def write():
        attempts.append(time.monotonic())
        Instance.objects.filter(pk=first.pk).update(updated=Now())
        if len(attempts) == 1:
            threading.Thread(target=other_takes_first).start()
            time.sleep(0.3)  # the other session now waits for our row
        Instance.objects.filter(pk=second.pk).update(updated=Now())
        return len(attempts)

    try:
        assert run_in_transaction(write, "default") == 2
    finally:
        other.close()
    assert set(Instance.objects.values_list("priority", flat=True)) == {1}


def _enqueue_one():
    return [atp.enqueue("tests.noop")]


def _enqueue_three():
    return atp.enqueue_many("tests.noop", [{}, {}, {}])


def _cancel_one():
    # Made before the lock is taken; cancelled inside the block.
    instance = atp.enqueue("tests.noop")

    def cancel():
        atp.cancel(instance)
        return [instance]
    return cancel


@pytest.mark.parametrize("type_known", [True, False], ids=["type known", "type not read yet"])
@pytest.mark.parametrize("verb", [_enqueue_one, _enqueue_three, _cancel_one])
def test_a_block_that_only_enqueues_waits_for_the_write_lock(sqlite_only, noop_type, verb,
                                                             type_known):
    """Django's blocks are deferred on SQLite: a verb that read before it wrote could not
    wait for the lock (SQLite refuses to turn a reader into a writer while another
    connection writes) and failed the caller's block with "database is locked"."""
    import importlib

    enqueue_module = importlib.import_module("atp.engine.enqueue")

    call = verb() if verb is _cancel_one else verb
    if type_known:
        atp.enqueue("tests.noop")
    else:
        enqueue_module._types.clear()
    holder = hold_write_lock(0.5)
    with transaction.atomic():
        instances = call()
    holder.join()
    for instance in instances:
        instance.refresh_from_db()
    assert len(instances) == (3 if verb is _enqueue_three else 1)


@pytest.mark.slow
def test_three_daemons_and_four_enqueuing_processes_with_djangos_defaults(sqlite_only, tmp_path,
                                                                          start_daemon):
    """Blocks that only enqueue never fail, and every task runs once, on SQLite as a project
    without a ``transaction_mode`` runs it. The daemons' lease outlasts the waits for the
    lock of 7 processes writing all the time (a second or two on the ORM engine)."""
    import json

    from tests.processes import start_module, wait_until

    atp.register_task_type("tests.exclusive_sleep", "tests.handlers.exclusive_sleep",
                           max_restarts=0)
    defaults = {"ATP_TEST_SQLITE_DJANGO_DEFAULTS": "1"}
    daemons = [start_daemon("--workers", 2, ATP_DAEMON_TIMEOUT_SECONDS=15,
                            ATP_HEARTBEAT_INTERVAL_SECONDS=1, **defaults) for _ in range(3)]
    wait_until(lambda: all("started: 2 workers" in d.output() for d in daemons), timeout=60,
               message="daemons started")
    enqueuers = [start_module("tests.atomic_enqueuer", tmp_path, 40, extra_env=defaults)
                 for _ in range(4)]
    reports = [json.loads(process.communicate(timeout=300)[0]) for process in enqueuers]
    errors = [error for report in reports for error in report["errors"]]
    assert errors == [], f"{len(errors)} blocks failed: {errors[:3]}"
    committed = [pk for report in reports for pk in report["committed"]]
    assert len(committed) == 4 * 40 * 4
    wait_until(lambda: Instance.objects.filter(status="FINISHED").count() == len(committed),
               timeout=300, message="every task finished", output=daemons[0].output)
    assert set(Instance.objects.values_list("pk", flat=True)) == set(committed)
    assert not list(tmp_path.glob("*.overlap")), "a task ran twice at once"
    assert set(Instance.objects.values_list("attempt", flat=True)) == {1}
    for daemon in daemons:
        assert "database unavailable" not in daemon.output()
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(30) == 0, daemon.output()
