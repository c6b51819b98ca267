"""The engines' SQL, read whole: every statement an engine runs is named in its file
(``atp/engine/statements/<engine>.sql``), and runs as written there.

Each statement is rendered by the database (prepared on PostgreSQL, compiled on SQLite,
explained on MariaDB/MySQL),
names atp's tables and columns as the models do, guards its transitions as
``atp.states`` allows, and repeats another's steps word for word where it repeats them.
"""

import ast
import importlib
import re
from pathlib import Path

import pytest
from django.apps import apps
from django.db import connection

from atp.engine import statements
from atp.engine.notify import QUEUE_CHANNEL
from atp.engine.records import PROGRESS_STATES, RUNS
from atp.engine.sql import CLAIM_ORDER_SQL, stored_fields
from atp.models import Inputs, Instance, Task, Type
from atp.states import Status, sources_of

ENGINES = ["postgresql", "sqlite", "mysql"]
ATP = Path(__file__).resolve().parents[2] / "atp"

#: The statements of each engine that return rows of models: the facts a claim returns
#: first, then each model's columns in field order (``atp.engine.sql.build`` reads them so).
FACTS = ["alive", "limited", "strays", "settled"]
CLAIMED = [Instance, Type, Inputs]
MODEL_ROWS = {
    "postgresql": {
        "claim": (FACTS, CLAIMED), "claim_within_limits": (FACTS, CLAIMED),
        "lease_keys": (FACTS, CLAIMED), "settle_and_claim": (FACTS, CLAIMED), "settle_and_claim_within_limits": (FACTS, CLAIMED),
        "start": ([], CLAIMED),
    },
    "sqlite": {
        "claimable_types": ([], [Type]), "schedule": ([], [Instance]), "start": ([], [Instance]),
        "type_of": ([], [Type]), "inputs_of": ([], [Inputs]), "inputs_of_claimed": ([], [Inputs]),
    },
    "mysql": {
        "claimable_types": ([], [Type]), "lock_limited": ([], [Type]),
        "lock_instances": ([], [Instance]), "instance_of": ([], [Instance]),
        "type_of": ([], [Type]), "inputs_of": ([], [Inputs]), "inputs_of_claimed": ([], [Inputs]),
    },
}

#: The transitions each statement guards, by target state: each ``status IN (...)`` it
#: writes lists the sources ``atp.states.TRANSITIONS`` gives one of them.
CLAIM_GUARDS = {Status.SCHEDULED}
SETTLE_GUARDS = {Status.FINISHED, Status.FAILED}
GUARDED = {
    "postgresql": {
        "claim": CLAIM_GUARDS, "claim_within_limits": CLAIM_GUARDS, "lease_keys": CLAIM_GUARDS,
        "settle_and_claim": CLAIM_GUARDS | SETTLE_GUARDS,
        "settle_and_claim_within_limits": CLAIM_GUARDS | SETTLE_GUARDS,
        "settle": SETTLE_GUARDS, "finish": {Status.FINISHED},
        # A handler's writes, which move no state: while its attempt runs (RUNS), and,
        # without an attempt, progress while the task runs or is paused.
        "log": {frozenset(RUNS)}, "set_progress": {frozenset(RUNS), frozenset(PROGRESS_STATES)},
    },
    "sqlite": {
        "schedule": CLAIM_GUARDS, "finish": {Status.FINISHED},
        "end_finished": {Status.FINISHED}, "end_failed": {Status.FAILED},
    },
    # The claim's and the settle's guards are decided in Python, on the rows they lock
    # (atp.engine.mysql: CLAIMABLE, ENDS_FROM).
    "mysql": {"finish": {Status.FINISHED}},
}

#: Statements that repeat the steps of another: each has every common table expression
#: of the other, word for word, but those named (which differ on purpose).
REPEATS = {
    "postgresql": [
        ("claim", "claim_within_limits", {"limited", "picked"}),
        # The tasks the gated claim chose, leased as the claim leases its own.
        ("claim", "lease_keys", {"kinds", "alive", "limited", "picked", "ranked"}),
        ("claim", "settle_and_claim", set()),
        ("claim_within_limits", "settle_and_claim_within_limits", {"quota"}),
        ("settle", "settle_and_claim", set()),
        ("settle", "settle_and_claim_within_limits", set()),
    ],
    "sqlite": [],
    "mysql": [],
}

GUARD_LIST = re.compile(r"(?<![\w.])(?:i\.)?status IN \(([^)]*)\)")
STEP = re.compile(r"\s*(\w+)(?:\([^)]*\))? AS \(")


def steps(sql):
    """Return ``{name: text}`` of the top-level common table expressions of ``sql``."""
    head = re.match(r"WITH (RECURSIVE )?", sql)
    found, position = {}, head.end() if head else len(sql)
    while match := STEP.match(sql, position):
        depth, position = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(sql[position], 0)
            position += 1
        found[match[1]] = sql[match.end():position - 1]
        if not sql.startswith(",", position):
            break
        position += 1
    return found


def columns_of(model):
    return [field.column for field in model._meta.concrete_fields]


@pytest.mark.parametrize("engine", ENGINES)
def test_the_engine_runs_every_statement_of_its_file_and_writes_no_sql_of_its_own(engine):
    module = importlib.import_module(f"atp.engine.{engine}")
    source = Path(module.__file__).read_text()
    assert set(re.findall(r'SQL\["(\w+)"\]', source)) == set(statements.load(engine))
    written = [node.value for node in ast.walk(ast.parse(source))
               if isinstance(node, ast.Constant) and isinstance(node.value, str)
               and re.search(r"\b(SELECT|INSERT|UPDATE|DELETE|WITH|NOTIFY)\b", node.value)]
    docstrings = {ast.get_docstring(node, clean=False) for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef)}
    assert [text for text in written if text not in docstrings] == []


@pytest.mark.parametrize("engine", ENGINES)
def test_the_statements_name_atp_tables_and_write_every_column(engine):
    models = {model._meta.db_table: model for model in apps.get_app_config("atp").get_models()}
    indexes = {index.name for index in Task._meta.indexes}
    for name, sql in statements.load(engine).items():
        assert set(re.findall(r"\batp_\w+", sql)) <= models.keys() | indexes | {QUEUE_CHANNEL}, name
        assert QUEUE_CHANNEL not in sql or sql == f"NOTIFY {QUEUE_CHANNEL}" or (
            f"pg_notify('{QUEUE_CHANNEL}', '')" in sql), name
        for table, listed in re.findall(r"INSERT INTO (\w+) \(([^)]*)\)", sql):
            written = [column.strip() for column in listed.split(",")]
            assert sorted(written) == sorted(field.column for field in stored_fields(models[table])), (
                name, table)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_guards_are_the_transitions_of_atp_states(engine):
    for name, sql in statements.load(engine).items():
        written = {frozenset(re.findall(r"'(\w+)'", listed)) for listed in GUARD_LIST.findall(sql)}
        expected = {frozenset(map(str, target if isinstance(target, frozenset)
                                  else sources_of(target)))
                    for target in GUARDED[engine].get(name, ())}
        assert written == expected, name


@pytest.mark.parametrize("engine", ENGINES)
def test_every_walk_of_the_queue_is_in_claim_order(engine):
    for name, sql in statements.load(engine).items():
        for clause in re.findall(r"ORDER BY ([^;)]*?priority DESC,[^;)]*?)(?: LIMIT|\)|\n|$)", sql):
            keys = [re.sub(r"^\w+\.", "", key.strip()) for key in clause.split(",")]
            keys[-1] = "instance_id" if keys[-1] == "id" else keys[-1]  # an instance's key
            assert "ORDER BY " + ", ".join(keys) == CLAIM_ORDER_SQL, (name, clause)


@pytest.mark.parametrize("engine", ENGINES)
def test_statements_that_repeat_a_step_repeat_it_word_for_word(engine):
    loaded = statements.load(engine)
    for original, repeating, differing in REPEATS[engine]:
        repeated = steps(loaded[repeating])
        for step, text in steps(loaded[original]).items():
            assert step in differing or repeated.get(step) == text, (original, repeating, step)


def test_the_step_splitter_finds_each_step():
    sql = "WITH a AS (SELECT f(1), (2)), b(x) AS (SELECT 1)\nSELECT * FROM a, b"
    assert steps(sql) == {"a": "SELECT f(1), (2)", "b": "SELECT 1"}


def test_a_file_is_read_as_named_whole_statements():
    text = ("-- header\n\n-- name: one\n-- why\nSELECT 1\n    -- why not\n  FROM x;\n\n"
            "-- name: two\nNOTIFY atp_queue;\n")
    assert statements.parse(text) == {"one": "SELECT 1\n  FROM x", "two": "NOTIFY atp_queue"}
    with pytest.raises(statements.StatementsFileError, match="'one' must hold one statement"):
        statements.parse("-- name: one\nSELECT 1; SELECT 2;\n")
    with pytest.raises(statements.StatementsFileError, match="'one' is named twice"):
        statements.parse("-- name: one\nSELECT 1;\n-- name: one\nSELECT 2;\n")


def test_placeholders_are_numbered_as_postgresql_takes_them():
    assert statements.numbered("SELECT %(a)s, %(b)b, %(a)s::text || '%%'") == (
        "SELECT $1, $2, $1::text || '%'", ("a", "b"))
    assert statements.numbered("SELECT %s, %b") == ("SELECT $1, $2", None)
    assert statements.numbered("SELECT 1") == ("SELECT 1", ())


@pytest.mark.parametrize(("sql", "why"), [
    ("SELECT %(a)s, %s", "all named or all positional"),
    ("SELECT %(a)s, %(a)b", "'a' is given two formats"),
    ("SELECT %(a)d", "is no placeholder"),
    ("SELECT %(a-b)s", "is no placeholder"),
    ("SELECT 5 % 2", "is no placeholder"),
    ("SELECT 5 %", "is no placeholder"),
])
def test_what_the_driver_refuses_is_refused_before_it_is_numbered(sql, why):
    with pytest.raises(ValueError, match=why):
        statements.numbered(sql)


def test_every_guard_make_guards_removes_is_written_where_it_says():
    from tests.guards import GUARDS, PROJECT_ROOT

    for guard in GUARDS:
        assert (PROJECT_ROOT / guard.path).read_text().count(guard.guarded) == guard.count, (
            guard.name)


def test_every_postgresql_statement_is_prepared_by_the_server_and_returns_model_rows(
        postgres_only, db):
    from psycopg import pq

    connection.ensure_connection()
    server = connection.connection.pgconn
    for name, sql in statements.load("postgresql").items():
        handle = f"atp_rendered_{name}".encode()
        prepared = server.prepare(handle, statements.numbered(sql)[0].encode())
        assert prepared.status == pq.ExecStatus.COMMAND_OK, (name, prepared.error_message)
        described = server.describe_prepared(handle)
        fields = [described.fname(index).decode() for index in range(described.nfields)]
        server.exec_(b"DEALLOCATE " + handle)
        if name in MODEL_ROWS["postgresql"]:
            facts, models = MODEL_ROWS["postgresql"][name]
            assert fields == facts + [column for model in models for column in columns_of(model)]


def test_every_sqlite_statement_is_compiled_by_the_library_and_returns_model_rows(db):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's statements")
    with connection.cursor() as cursor:
        for name, sql in statements.load("sqlite").items():
            named = re.findall(r"%\((\w+)\)s", sql)
            assert not (named and re.search(r"%s", sql)), f"{name}: one style of placeholder"
            params = dict.fromkeys(named) if named else [None] * sql.count("%s")
            cursor.execute(f"EXPLAIN {sql}", params)
            if name in MODEL_ROWS["sqlite"]:  # its lists given as NULL: it writes nothing
                cursor.execute(sql, params)
                facts, models = MODEL_ROWS["sqlite"][name]
                assert [column[0] for column in cursor.description] == facts + [
                    column for model in models for column in columns_of(model)], name


def test_every_mysql_statement_is_explained_by_the_server_and_returns_model_rows(db):
    """And each list of keys is found by its primary key, the claim's walk is the claim
    index in its order: the plans the engine's speed rests on (JSON_TABLE first, then
    each row by its key: a plan that scanned a table instead is a claim that waits on
    every other claim's locks)."""
    if connection.vendor != "mysql":
        pytest.skip("MariaDB/MySQL's statements")
    with connection.cursor() as cursor:
        for name, sql in statements.load("mysql").items():
            named = re.findall(r"%\((\w+)\)s", sql)
            assert not (named and re.search(r"%s", sql)), f"{name}: one style of placeholder"
            params = dict.fromkeys(named) if named else [None] * sql.count("%s")
            if "limit" in named:
                params["limit"] = 1
            if name == "waiting":  # with NULLs its WHERE is impossible, on the index's `gated`
                params.update(now="2026-01-01 00:00:00", types="[1]")
            cursor.execute(f"EXPLAIN {sql}", params)
            plan = {row[2]: row for row in cursor.fetchall()}  # by table
            if "JSON_TABLE" in sql:
                joined = [table for table in plan if table != "j"]
                for table in joined:
                    assert plan[table][3] == "eq_ref" and plan[table][5] == "PRIMARY", (name, plan)
            if name == "waiting":
                (row,) = plan.values()
                assert row[5] == "atp_task_claim_idx" and "filesort" not in (row[9] or ""), plan
            if name in MODEL_ROWS["mysql"]:  # its lists given as NULL: it reads nothing
                cursor.execute(sql, params)
                facts, models = MODEL_ROWS["mysql"][name]
                assert [column[0] for column in cursor.description] == facts + [
                    column for model in models for column in columns_of(model)], name
