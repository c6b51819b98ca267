"""The daemon's upkeep of the queue table on PostgreSQL: analyze after a large change in
size, vacuum when dead rows pile up (autovacuum is off on the development machine)."""

import pytest
from django.db import connection

import atp
from atp.daemon import maintenance
from atp.engine import upkeep
from atp.models import Task


@pytest.mark.parametrize(("estimated", "live", "dead", "expected"), [
    (-1, 0, 0, None),  # never analyzed, empty
    (-1, 999, 0, None),  # small change
    (-1, 1000, 0, "analyze"),  # never analyzed, now 1,000 rows
    (0, 100_000, 0, "analyze"),  # analyzed while empty, then a burst
    (100_000, 60_000, 40_000, None),  # drained by 40 %: within the ratio, more live than dead
    (100_000, 45_000, 5_000, "analyze"),  # drained by 55 %
    (10, 10, 9_999, None),  # dead rows, but fewer than the threshold
    (3000, 10, 10_000, "vacuum"),
    (100_000, 40_000, 60_000, "vacuum"),  # more dead than live
])
def test_what_the_queue_table_needs(estimated, live, dead, expected):
    assert upkeep.needs(estimated, live, dead) == expected


def _counters():
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(upkeep.STATE, ["atp_task"])
        return cursor.fetchone()


def _flushed(predicate):
    """Wait for this backend's counters to reach the shared statistics."""
    import time

    for _ in range(100):
        row = _counters()
        if predicate(*row):
            return row
        time.sleep(0.05)
    raise AssertionError(f"counters never matched: {row}")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_daemon_analyzes_the_queue_table_after_a_burst_and_vacuums_its_dead_rows(
        postgres_only, noop_type):
    with connection.cursor() as cursor:
        # Clear what earlier tests left (their rolled-back rows are dead rows), and
        # analyze while empty: the planner believes 0 rows.
        cursor.execute("VACUUM (ANALYZE) atp_task")
    atp.enqueue_many("tests.noop", [None] * 3000)
    _flushed(lambda estimated, live, dead: live >= 3000)
    assert maintenance.tend_queue_table() == "analyze"
    estimated, live, dead = _counters()
    assert estimated == 3000
    assert maintenance.tend_queue_table() is None  # nothing drifted since

    atp.enqueue_many("tests.noop", [None] * 9000)
    Task.objects.all().delete()
    _flushed(lambda estimated, live, dead: dead >= 12_000)
    assert maintenance.tend_queue_table() == "vacuum"
    estimated, live, dead = _counters()
    assert (estimated, live, dead) == (0, 0, 0)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_vacuum_clears_dead_rows_that_are_a_small_part_of_a_large_table(
        postgres_only, noop_type, monkeypatch):
    """PostgreSQL's vacuum leaves the index entries of dead rows, and counts the rows as
    dead still, when they fill under 2 % of the table's pages; a queue table a burst made
    large (its pages are kept) would then be vacuumed again at every look."""
    monkeypatch.setattr(upkeep, "VACUUM_MIN_DEAD", 50)  # a table 100 times smaller
    atp.enqueue_many("tests.noop", [None] * 20_000)
    Task.objects.all().delete()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE) atp_task")  # the burst's pages stay, empty
        cursor.execute("SELECT pg_relation_size('atp_task') / current_setting('block_size')::int")
        assert cursor.fetchone()[0] >= 200  # 60 rows fill 1 or 2 of them: under 2 %
    atp.enqueue_many("tests.noop", [None] * 60)
    Task.objects.all().delete()
    _flushed(lambda estimated, live, dead: dead >= 60)
    assert maintenance.tend_queue_table() == "vacuum"
    assert _counters()[2] == 0
    assert maintenance.tend_queue_table() is None


def test_the_upkeep_does_nothing_on_other_databases_or_inside_a_transaction(noop_type, db):
    atp.enqueue_many("tests.noop", [None] * 1500)
    assert maintenance.tend_queue_table() is None


@pytest.mark.django_db(transaction=True)
def test_a_vacuum_leaves_the_empty_pages_of_the_tables_tasks_churn(postgres_only, noop_type):
    """Truncating them takes the table's ACCESS EXCLUSIVE lock, which stops every
    enqueue, claim and end while it lasts: under a steady stream, autovacuum did that
    every minute to the queue table and now and then to the others. The pages are
    reused by the next rows anyway."""
    tables = ["atp_task", "atp_instance", "atp_inputs", "atp_logrecord"]
    tasks = atp.enqueue_many("tests.noop", [{}] * 600)
    for task in tasks:
        atp.cancel(task)  # ended: off the queue, its history one entry longer
    with connection.cursor() as cursor:
        full = {}
        for table in tables:
            cursor.execute("SELECT pg_relation_size(%s)", [table])
            full[table] = cursor.fetchone()[0]
        assert atp.purge_finished(older_than=0) == 600  # as retention does
        left = {}
        for table in tables:
            cursor.execute(f"VACUUM {table}")
            cursor.execute("SELECT pg_relation_size(%s)", [table])
            left[table] = cursor.fetchone()[0]
    assert left == full and all(full.values()), (full, left)
