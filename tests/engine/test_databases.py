"""What ``atp.engine.databases`` reads of each database for ``manage.py atp doctor``."""

import pytest
from django.db import connection

from atp.engine import databases
from atp.engine.databases import PORTABLE, MySQL, PostgreSQL, SQLite, TableSize, database_of
from atp.engine.upkeep import VACUUM_MIN_DEAD

pytestmark = pytest.mark.django_db

TABLES = ["atp_task", "atp_instance", "atp_logrecord"]


def test_the_tables_sizes_are_read_from_the_database(noop_type):
    with connection.cursor() as cursor:
        sizes = database_of(connection).table_sizes(cursor, TABLES)
    if connection.vendor == "sqlite":
        [whole] = sizes  # SQLite counts the pages of the whole file
        assert whole.table is None and whole.bytes > 0 and whole.free_bytes >= 0
        return
    assert sorted(size.table for size in sizes) == sorted(TABLES)
    assert all(size.bytes > 0 for size in sizes)
    if connection.vendor == "postgresql":
        assert all(size.dead_rows is not None and size.free_bytes is None for size in sizes)
    else:
        assert all(size.free_bytes is not None and size.dead_rows is None for size in sizes)


def test_a_database_atp_does_not_know_says_nothing_of_its_sizes():
    with connection.cursor() as cursor:
        assert PORTABLE.table_sizes(cursor, TABLES) is None
    assert PORTABLE.space_remedy(TableSize("atp_task", 10**12, free_bytes=10**12)) == ""


def test_postgresql_asks_for_a_vacuum_by_the_rule_its_daemons_vacuum_by():
    remedy = PostgreSQL().space_remedy
    assert remedy(TableSize("atp_task", 1, rows=10, dead_rows=VACUUM_MIN_DEAD - 1)) == ""
    assert remedy(TableSize("atp_task", 1, rows=VACUUM_MIN_DEAD * 2, dead_rows=VACUUM_MIN_DEAD)) == ""
    assert remedy(TableSize("atp_task", 1, rows=10, dead_rows=VACUUM_MIN_DEAD)).startswith(
        "VACUUM (ANALYZE, INDEX_CLEANUP ON) atp_task")


@pytest.mark.parametrize("database, statement", [(MySQL(), "OPTIMIZE TABLE atp_task"),
                                                 (SQLite(), "VACUUM")])
def test_free_space_is_worth_giving_back_when_large_and_more_than_what_is_used(database, statement):
    large = databases.RECLAIM_MIN_BYTES
    assert database.space_remedy(TableSize("atp_task", large * 2 + 1, free_bytes=large)) == ""
    assert database.space_remedy(TableSize("atp_task", large, free_bytes=large - 1)) == ""
    assert database.space_remedy(
        TableSize("atp_task", large * 2, free_bytes=large + 1)).startswith(statement)
