"""The PostgreSQL sessions of this test's own processes, and nobody else's.

One PostgreSQL server may serve other test suites and projects at the same time. Every
look a test takes at ``pg_stat_activity``, and every session it terminates, goes
through here, where the filter is written once: the test's database (``datname``) and
the processes the test started, recognised by the ``application_name`` each was given
(``tests.processes`` hands it over, ``tests/settings.py`` sets it on the connection;
a daemon's workers and LISTEN connection inherit their daemon's).
"""

import itertools
import os

from django.db import connection

_numbers = itertools.count(1)


def new_application_name():
    """Return an ``application_name`` no other process on the server has."""
    return f"atp-test-{os.getpid()}-{next(_numbers)}"


def _where(processes, query, database):
    names = [process.application_name for process in processes]
    condition = "datname = current_database()" if database is None else "datname = %s"
    params = [] if database is None else [database]
    condition += " AND application_name = ANY(%s)"
    params.append(names)
    if query is not None:
        condition += " AND query = %s"
        params.append(query)
    return condition, params


def _run(cursor, select, processes, query, database):
    condition, params = _where(processes, query, database)
    return cursor.execute(f"SELECT {select} FROM pg_stat_activity WHERE {condition}", params)


def queries(processes):
    """Return the last statement of each session of ``processes`` (started ``Daemon``\\ s)."""
    with connection.cursor() as cursor:
        _run(cursor, "query", processes, None, None)
        return [row[0] for row in cursor.fetchall()]


def terminate(processes, *, query=None, database=None, cursor=None):
    """End the sessions of ``processes`` (those whose last statement was ``query``, if
    given) in this test's database, or in ``database`` from a ``cursor`` connected
    elsewhere; return how many were ended."""
    if cursor is None:
        with connection.cursor() as cursor:
            return terminate(processes, query=query, database=database, cursor=cursor)
    _run(cursor, "count(pg_terminate_backend(pid))", processes, query, database)
    return cursor.fetchone()[0]


def wait_event_type(backend_pid):
    """Return what this test's session ``backend_pid`` waits for now (None: nothing, or gone)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid = %s", [backend_pid])
        row = cursor.fetchone()
    return None if row is None else row[0]
