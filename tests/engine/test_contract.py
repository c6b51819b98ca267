"""The engine contract: every engine implements it in full, ``engine()`` always returns
one, and nothing outside ``atp/engine/`` asks for a database's vendor."""

import ast
from pathlib import Path

import pytest
from django.db import connection
from django.db.utils import ConnectionHandler

from atp.conf import conf
from atp.engine import databases, engines
from atp.engine.contract import VERBS, Engine
from atp.engine.mysql import MySQLEngine
from atp.engine.orm import OrmEngine
from atp.engine.postgresql import PostgreSQLEngine
from atp.engine.sqlite import SQLiteEngine

ENGINES = [PostgreSQLEngine, SQLiteEngine, MySQLEngine, OrmEngine]
ATP = Path(__file__).resolve().parents[2] / "atp"
#: What only atp/engine/ may compare to: a vendor, or a module of one.
VENDORS = {"postgresql", "sqlite", "mysql", "oracle", "mariadb"}


def test_the_contract_names_the_verbs_of_the_hot_path():
    assert set(VERBS) == {"claim", "settle_and_claim", "settle", "start", "finish", "enqueue",
                          "enqueue_many", "next_due", "lease", "purge", "log", "set_progress"}


@pytest.mark.parametrize("engine_class", ENGINES, ids=lambda cls: cls.name)
def test_every_engine_implements_every_verb(engine_class):
    engine = engine_class(databases.PORTABLE)  # an abstract verb left out raises here
    assert isinstance(engine, Engine)
    assert [verb for verb in VERBS if getattr(engine_class, verb) is getattr(Engine, verb)] == []


def test_an_engine_without_a_verb_cannot_be_made():
    class Partial(Engine):
        name = "partial"

        def claim(self, daemon, limit, type_ids, *, start=0, inputs=False, limited=False):
            return [], []

    with pytest.raises(TypeError, match="abstract"):
        Partial(databases.PORTABLE)


@pytest.mark.parametrize("choice", ["auto", "orm"])
def test_engine_always_returns_an_engine_on_the_database_it_serves(choice, settings):
    settings.ATP_ENGINE = choice
    chosen = engines.engine()
    assert isinstance(chosen, Engine)
    assert chosen.database is databases.database_of(connection)
    expected = {"postgresql": "postgresql", "sqlite": "sqlite", "mysql": "mysql"}.get(
        connection.vendor, "orm")
    assert chosen.name == (expected if choice == "auto" else "orm")


def test_a_database_atp_has_no_engine_for_gets_the_portable_engine_and_database(monkeypatch):
    handler = ConnectionHandler({"default": {"ENGINE": "django.db.backends.dummy"},
                                 "other": {"ENGINE": "django.db.backends.dummy"}})
    monkeypatch.setattr(engines, "connections", handler)
    monkeypatch.setattr(databases, "connections", handler)
    chosen = engines.engine_for("other")
    assert type(chosen) is OrmEngine
    assert chosen.database is databases.PORTABLE
    assert chosen.database.wakeup == "poll"


def test_an_unknown_engine_setting_is_refused(settings):
    from django.core.exceptions import ImproperlyConfigured

    settings.ATP_ENGINE = "fast"
    assert conf.ENGINE == "fast"
    with pytest.raises(ImproperlyConfigured, match='"auto" or "orm"'):
        engines.engine()


def _vendor_checks(path):
    """Return ``(line, source)`` of each comparison in ``path`` with a connection's
    ``vendor`` or with a vendor's name."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "vendor":
            found.append(node)
        elif isinstance(node, ast.Compare):
            names = [part for part in (node.left, *node.comparators)
                     if isinstance(part, ast.Constant) and part.value in VENDORS]
            names += [element for part in node.comparators
                      if isinstance(part, (ast.Tuple, ast.List, ast.Set))
                      for element in part.elts
                      if isinstance(element, ast.Constant) and element.value in VENDORS]
            found += names
        elif isinstance(node, ast.ImportFrom) and node.module == "atp.engine":
            found += [node for alias in node.names if alias.name in VENDORS]
        elif isinstance(node, ast.ImportFrom) and node.module in {
                f"atp.engine.{vendor}" for vendor in VENDORS}:
            found.append(node)
    return sorted((node.lineno, ast.get_source_segment(path.read_text(), node)) for node in found)


def test_no_vendor_is_checked_outside_the_engine():
    outside = {
        str(path.relative_to(ATP)): checks
        for path in sorted(ATP.rglob("*.py"))
        if path.parent.name != "engine" and (checks := _vendor_checks(path))
    }
    assert outside == {}


def test_the_scan_finds_a_vendor_check(tmp_path):
    """The scan above cannot pass for want of looking."""
    written = tmp_path / "module.py"
    written.write_text(
        "from atp.engine import postgresql\n"
        "if connection.vendor == 'x':\n    pass\n"
        "if name in ('sqlite', 'other'):\n    pass\n")
    assert sorted(line for line, _ in _vendor_checks(written)) == [1, 2, 4]
