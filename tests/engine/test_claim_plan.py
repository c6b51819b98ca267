"""The claim walks the claim index in claim order, whatever the planner's statistics say.

A queue table churns: every task inserts, updates and deletes its row. Its statistics
lag behind (autovacuum off, or a burst of enqueues since the last analyze), and a
planner that believes the table empty would rather sort every waiting row than walk
the index. These tests EXPLAIN the statements the daemon really executes.
"""

import json

import pytest
from django.db import connection

import atp
from atp import engine
from atp.engine import postgresql
from atp.engine.claim import runnable_keys_statement
from atp.models import Type

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

WAITING = 100_000


def _analyze_while_empty():
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE atp_task" if connection.vendor == "postgresql" else "ANALYZE")


def _enqueue(count):
    """Queue ``count`` tasks: with one statement per table on PostgreSQL (a claim reads
    neither their inputs nor their history), through ``enqueue_many`` elsewhere."""
    if connection.vendor != "postgresql":
        for start in range(0, count, 10_000):
            atp.enqueue_many("tests.noop", [None] * min(10_000, count - start))
        return
    type_id = Type.objects.get(identifier="tests.noop").pk
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH new AS (
                INSERT INTO atp_instance (type_id, identifier, status, priority, attempt,
                    restarts, progress_message, created, updated)
                SELECT %s, 'waiting-' || n, 'ACCEPTED', n %% 3, 0, 0, '', now(), now()
                FROM generate_series(1, %s) AS n
                RETURNING id, identifier, priority, created
            )
            INSERT INTO atp_task (instance_id, type_id, identifier, priority, enqueued, not_before)
            SELECT id, %s, identifier, priority, created, created FROM new
            """,
            [type_id, count, type_id],
        )


def _nodes(plan):
    """Yield every node of a JSON plan, depth first."""
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


def picked_nodes(plan_json):
    """Return the nodes of the CTE that picks the queue rows."""
    root = plan_json[0]["Plan"]
    for node in _nodes(root):
        if node.get("Subplan Name") == "CTE picked":
            return list(_nodes(node))
    raise AssertionError(f"no CTE picked in {json.dumps(plan_json)[:2000]}")


def explain_hot_claim(daemon, type_ids):
    with connection.cursor() as cursor:
        postgresql.execute_claim(cursor, f"EXPLAIN (FORMAT JSON) {postgresql.CLAIM}",
                              postgresql.claim_parameters(daemon, 8, type_ids))
        plan = cursor.fetchone()[0]
    return plan if isinstance(plan, list) else json.loads(plan)


def _forget_statistics():
    """Make ``atp_task`` look never analyzed (a superuser's change, rolled back after the test)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        if not cursor.fetchone()[0]:
            pytest.skip("forgetting a table's statistics needs a superuser")
        cursor.execute("DELETE FROM pg_statistic WHERE starelid = 'atp_task'::regclass")
        cursor.execute("UPDATE pg_class SET reltuples = -1, relpages = 0 "
                       "WHERE oid = 'atp_task'::regclass")


@pytest.mark.parametrize("statistics", ["never analyzed", "analyzed while empty", "fresh"])
def test_the_daemons_claim_walks_the_claim_index_on_postgresql(
        postgres_only, noop_type, daemon, statistics):
    if statistics == "analyzed while empty":
        _analyze_while_empty()
    _enqueue(WAITING)
    if statistics == "never analyzed":
        _forget_statistics()
    elif statistics == "fresh":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE atp_task")
    picked = picked_nodes(explain_hot_claim(daemon, [noop_type.pk]))
    kinds = [node["Node Type"] for node in picked]
    assert [node.get("Index Name") for node in picked if node["Node Type"] == "Index Scan"] == [
        "atp_task_claim_idx"], kinds
    assert "Sort" not in kinds and "Bitmap Heap Scan" not in kinds, kinds
    assert "Seq Scan" not in kinds, kinds
    # And it claims, in claim order.
    claimed = engine.claim_for_daemon(daemon, 3, [noop_type.pk])
    assert [task.pk for task in claimed] == sorted(task.pk for task in claimed)
    assert len(claimed) == 3


def test_a_claim_with_a_concurrency_limit_walks_the_claim_index_too(postgres_only, noop_type):
    atp.register_task_type("tests.noop", "tests.handlers.noop", max_concurrency=5)
    _enqueue(WAITING)
    _forget_statistics()
    sql, params = runnable_keys_statement([noop_type.pk], [], 8)
    with connection.cursor() as cursor:
        cursor.execute(postgresql.CLAIM_PLAN)
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    plan = plan if isinstance(plan, list) else json.loads(plan)
    nodes = list(_nodes(plan[0]["Plan"]))
    kinds = [node["Node Type"] for node in nodes]
    assert [node.get("Index Name") for node in nodes if node["Node Type"] == "Index Scan"] == [
        "atp_task_claim_idx"], kinds
    assert "Sort" not in kinds and "Bitmap Heap Scan" not in kinds, kinds


@pytest.mark.parametrize("statistics", ["none", "analyzed while empty"])
def test_the_claim_walks_the_claim_index_on_sqlite(noop_type, statistics):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite planner")
    if statistics == "analyzed while empty":
        _analyze_while_empty()
    _enqueue(20_000)
    sql, params = runnable_keys_statement([noop_type.pk], [], 8)
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        plan = " | ".join(str(row[-1]) for row in cursor.fetchall())
    assert "USING INDEX atp_task_claim_idx" in plan, plan
    assert "TEMP B-TREE" not in plan, plan  # no sort
