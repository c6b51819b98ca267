"""The claim walks the claim index in claim order, whatever the planner's statistics say.

A queue table churns: every task inserts, updates and deletes its row. Its statistics
lag behind (autovacuum off, or a burst of enqueues since the last analyze), and a
planner that believes the table empty would rather sort every waiting row than walk
the index. These tests EXPLAIN the statements the daemon really executes.
"""

import json
import re

import pytest
from django.db import connection
from django.utils import timezone

import atp
from atp import engine
from atp.engine import postgresql, statements
from atp.engine.orm import runnable_keys_statement
from atp.models import Type
from tests.bulk import unchecked_references

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
    with connection.cursor() as cursor, unchecked_references(cursor):
        cursor.execute(
            """
            WITH new AS (
                INSERT INTO atp_instance (type_id, identifier, named, status, priority, attempt,
                    restarts, retries, snoozes, progress_message, created, updated)
                SELECT %s, 'waiting-' || n, false, 'ACCEPTED', n %% 3, 0, 0, 0, 0, '', now(), now()
                FROM generate_series(1, %s) AS n
                RETURNING id, identifier, priority, created
            )
            INSERT INTO atp_task (instance_id, type_id, identifier, priority, enqueued, not_before,
                gated)
            SELECT id, %s, identifier, priority, created, created, false FROM new
            """,
            [type_id, count, type_id],
        )


def _waiting_with(statistics):
    """Queue ``WAITING`` tasks, then leave the statistics of ``atp_task`` and ``atp_instance``
    "never analyzed", "fresh", or those of the queue table only fresh (as the daemons'
    upkeep keeps them: "tasks never analyzed")."""
    _enqueue(WAITING)
    if statistics == "never analyzed":
        _forget_statistics("atp_task", "atp_instance")
    elif statistics == "tasks never analyzed":
        _forget_statistics("atp_instance")
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE atp_task")
    else:
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE atp_task")
            cursor.execute("ANALYZE atp_instance")


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
        postgresql.execute_claim(cursor, f"EXPLAIN (FORMAT JSON) {postgresql.SQL['claim']}",
                              postgresql.claim_parameters(daemon, 8, type_ids))
        plan = cursor.fetchone()[0]
    return plan if isinstance(plan, list) else json.loads(plan)


def _forget_statistics(*tables):
    """Make ``tables`` (``atp_task``) look never analyzed (a superuser's change, rolled back
    after the test)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        if not cursor.fetchone()[0]:
            pytest.skip("forgetting a table's statistics needs a superuser")
        for table in tables or ["atp_task"]:
            cursor.execute("DELETE FROM pg_statistic WHERE starelid = %s::regclass", [table])
            cursor.execute("UPDATE pg_class SET reltuples = -1, relpages = 0 "
                           "WHERE oid = %s::regclass", [table])


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
    with connection.cursor() as cursor:
        sql, params = runnable_keys_statement([noop_type.pk], [], 8, cursor)  # CLAIM_PLAN set
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
    with connection.cursor() as cursor:
        sql, params = runnable_keys_statement([noop_type.pk], [], 8, cursor)
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        plan = " | ".join(str(row[-1]) for row in cursor.fetchall())
    assert "USING INDEX atp_task_claim_idx" in plan, plan
    assert "TEMP B-TREE" not in plan, plan  # no sort


@pytest.mark.parametrize("statistics", ["none", "analyzed while empty"])
def test_the_sqlite_engines_claims_walk_the_claim_index(noop_type, daemon, statistics):
    """The SQLite engine's statements take their lists as one JSON parameter: the claim
    still walks the claim index in claim order (within limits, once for the types without
    a limit and once per limited type, reading the others by key), and schedules the
    tasks it took by their keys."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite planner")
    from atp.engine import sqlite

    if statistics == "analyzed while empty":
        _analyze_while_empty()
    limited = atp.register_task_type("tests.limited", "tests.handlers.noop", max_concurrency=3)
    _enqueue(20_000)
    atp.enqueue_many("tests.limited", [None] * 1_000)
    types = json.dumps([noop_type.pk, limited.pk])
    now = sqlite._stamp(timezone.now())
    plans = {}
    with connection.cursor() as cursor:
        for name, params in [
            ("waiting", {"now": now, "types": types, "limit": 8}),
            ("waiting_within_limits", {"now": now, "unlimited": json.dumps([noop_type.pk]),
                                       "free": json.dumps({limited.pk: 3}), "limit": 8}),
            ("next_due", {"now": now, "bound": now, "types": types}),
            ("schedule", {"daemon": daemon.pk, "now": now, "starting": "[1]", "keys": "[1, 2]"}),
        ]:
            cursor.execute(f"EXPLAIN QUERY PLAN {sqlite.SQL[name]}", params)
            plans[name] = [str(row[-1]) for row in cursor.fetchall()]
    reads = [step for name in ("waiting", "waiting_within_limits", "next_due")
             for step in plans[name] if re.search(r"\b(SCAN|SEARCH) (atp_task|t)\b", step)]
    assert reads and all("USING INDEX atp_task_claim_idx" in step or "(instance_id=?)" in step
                         for step in reads), plans
    walks = [step for step in plans["waiting_within_limits"] if "atp_task_claim_idx" in step]
    assert len(walks) == 2, plans
    assert not any("TEMP B-TREE" in step for step in plans["waiting"]), plans  # no sort
    assert plans["schedule"][0] == "SEARCH atp_instance USING INTEGER PRIMARY KEY (rowid=?)", plans
    # And the engine claims in claim order, within the limit.
    claimed = engine.claim_for_daemon(daemon, 6, [limited.pk, noop_type.pk])
    assert [task.pk for task in claimed] == sorted(task.pk for task in claimed)
    assert len(claimed) == 6


def kept_plan(sql, params):
    """Return the plan PostgreSQL keeps for ``sql`` as the daemon runs it: prepared on the
    connection, and planned once, generically, under ``bound_claim_plan``."""
    text, order = statements.numbered(sql)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, parameter_types::text[] FROM pg_prepared_statements "
            "WHERE statement = %s", [text])
        row = cursor.fetchone()
        assert row is not None, "the daemon's statement is not prepared"
        name, types = row
        cursor.execute(postgresql.SQL["bound_claim_plan"])
        arguments = ", ".join(f"%s::{kind}" for kind in types)
        cursor.execute(f"EXPLAIN (FORMAT JSON) EXECUTE {name}({arguments})",
                       [params[key] for key in order])
        plan = cursor.fetchone()[0]
    return plan if isinstance(plan, list) else json.loads(plan)


#: The indexes the daemon's round may read its tables by: a task's own key, the
#: claim index (walked in claim order), a daemon's leases.
KEYED = {"atp_instance": {"atp_instance_pkey"}, "atp_inputs": {"atp_inputs_pkey"},
         "atp_task": {"atp_task_pkey", "atp_task_claim_idx", "atp_task_lease_idx",
                      "atp_task_type_lease_idx"}}


@pytest.mark.parametrize("limited", [False, True], ids=["no limit", "max_concurrency"])
@pytest.mark.parametrize("statistics", ["never analyzed", "tasks never analyzed", "fresh"])
def test_the_plan_kept_for_the_daemons_round_reads_each_row_by_its_key(
        postgres_only, noop_type, daemon, statistics, limited):
    """The round the daemon repeats (``settle_and_claim``) is prepared and planned once:
    that plan, not a fresh one, must walk the claim index and read every other row by
    its key, however many tasks wait (it once hashed every ACCEPTED task to start 4).
    Within a concurrency limit, the type's leases are counted by its key too."""
    from atp.engine.engines import engine as chosen
    from atp.engine.outcomes import Outcome

    if chosen().name != "postgresql":
        pytest.skip("the PostgreSQL engine's statement")
    if limited:
        atp.register_task_type("tests.noop", "tests.handlers.noop", max_concurrency=50)
    _waiting_with(statistics)
    outcomes = [Outcome.finished(0, 1, None)]  # no such task: written as nothing
    settled, claimed = engine.settle_and_claim(daemon, outcomes, 4, [noop_type.pk], start=4,
                                              limited=limited)
    assert (settled, len(claimed)) == (set(), 4)
    params = {**postgresql.settle_parameters(daemon, outcomes),
              **postgresql.claim_parameters(daemon, 4, [noop_type.pk], start=4, inputs=True)}
    statement = postgresql.SQL[
        "settle_and_claim_within_limits" if limited else "settle_and_claim"]
    assert_read_by_keys(kept_plan(statement, params), limited)


def test_the_plan_kept_for_a_settle_reads_each_row_by_its_key(postgres_only, noop_type, daemon):
    """The ends written alone (``settle``, as a stopping daemon does) are planned once too."""
    from atp.engine.engines import engine as chosen
    from atp.engine.outcomes import Outcome

    if chosen().name != "postgresql":
        pytest.skip("the PostgreSQL engine's statement")
    _waiting_with("never analyzed")
    outcomes = [Outcome.finished(0, 1, None)]
    assert engine.settle(daemon, outcomes) == set()
    plan = kept_plan(postgresql.SQL["settle"], postgresql.settle_parameters(daemon, outcomes))
    assert_read_by_keys(plan, limited=False)


#: The steps of the round with a row per task type, or one row: as many whatever the
#: number of tasks.
PER_TYPE = {"kinds", "alive", "limited", "bucket", "quota"}


def _reads_tasks_of_a_step(node):
    """Whether ``node`` reads what a step of the statement produced for its tasks (the
    ends given, a common table expression with a row per task), not a table."""
    return node["Node Type"] == "Function Scan" or (
        node["Node Type"] == "CTE Scan" and node["CTE Name"] not in PER_TYPE)


def joins_of_two_steps(nodes):
    """Return the joins of ``nodes`` whose two sides both read steps of the statement with
    a row per task: a nested loop over both (the planner takes a step for a row or a
    few), quadratic in the tasks of a round (30 ms of a 60 ms round of 250 tasks once)."""
    found = []
    for node in nodes:
        sides = [child for child in node.get("Plans", ())
                 if child.get("Parent Relationship") in ("Outer", "Inner")]
        if len(sides) == 2 and all(
                any(_reads_tasks_of_a_step(read) for read in _looped(side)) for side in sides):
            found.append((node["Node Type"], node.get("Join Filter")))
    return found


def _looped(plan):
    """Yield the nodes of ``plan`` a join runs again for each row: not its init plans, run once."""
    yield plan
    for child in plan.get("Plans", ()):
        if child.get("Parent Relationship") not in ("InitPlan", "SubPlan"):
            yield from _looped(child)


def assert_read_by_keys(plan, limited):
    nodes = list(_nodes(plan[0]["Plan"]))
    assert not joins_of_two_steps(nodes), joins_of_two_steps(nodes)
    reads = [(node["Relation Name"], node["Node Type"], node.get("Index Name"),
              node.get("Index Cond"))
             for node in nodes if node.get("Relation Name") in KEYED
             and node["Node Type"] not in ("ModifyTable", "LockRows")]
    assert reads, nodes
    for table, kind, index, condition in reads:
        assert kind in ("Index Scan", "Index Only Scan") and index in KEYED[table], reads
        # By a key: a walk of a whole index is as slow as a scan of its table (the lock
        # of the settled tasks' rows once walked all of atp_instance, 95 ms a round
        # with 100,000 tasks).
        assert condition or index == "atp_task_claim_idx", reads
    assert "Hash Join" not in [node["Node Type"] for node in nodes if any(
        child.get("Relation Name") == "atp_instance" for child in _nodes(node))], reads
    if limited:
        assert ("atp_task", "atp_task_type_lease_idx") in [
            (table, index) for table, _, index, _ in reads], reads


@pytest.mark.parametrize("statistics", ["never analyzed", "fresh"])
def test_the_next_due_time_is_read_by_probes_of_the_claim_index(
        postgres_only, noop_type, statistics):
    _waiting_with(statistics)
    with connection.cursor() as cursor:
        postgresql.execute_planned(cursor, f"EXPLAIN (FORMAT JSON) {postgresql.SQL['next_due']}",
                                 {"types": [noop_type.pk], "within": 1.0})
        plan = cursor.fetchone()[0]
    plan = plan if isinstance(plan, list) else json.loads(plan)
    nodes = list(_nodes(plan[0]["Plan"]))
    reads = [(node["Node Type"], node.get("Index Name")) for node in nodes
             if node.get("Relation Name") == "atp_task"]
    assert reads and all(index == "atp_task_claim_idx" for _, index in reads), reads
    kinds = [node["Node Type"] for node in nodes]
    assert "Sort" not in kinds and "Seq Scan" not in kinds, kinds
    assert engine.next_due([noop_type.pk], 1.0) is None  # all runnable now
