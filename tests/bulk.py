"""Test data written in bulk on PostgreSQL."""

from contextlib import contextmanager


@contextmanager
def unchecked_references(cursor):
    """Run the block's statements without PostgreSQL's row-by-row foreign key checks.

    For test data of 100,000 rows and more, written by statements whose references are
    right by construction (the rows name the type made before, or the rows the same
    statement inserts). Django declares its foreign keys deferred: every row queues a
    check, and Django's test teardown runs them all (``SET CONSTRAINTS ALL IMMEDIATE``),
    2-5 s a test here besides the time to queue them. A session that may not switch
    them off (not a superuser) runs them.
    """
    cursor.execute("SELECT current_setting('is_superuser') = 'on'")
    [may] = cursor.fetchone()
    if may:
        cursor.execute("SET session_replication_role = replica")
    try:
        yield
    finally:
        if may:
            cursor.execute("SET session_replication_role = DEFAULT")
