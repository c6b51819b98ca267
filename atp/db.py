"""Transactions for the queue verbs, and the per-database behaviour they rely on.

SQLite has one writer at a time. In a plain (deferred) ``BEGIN`` a transaction takes
the write lock only at its first write, and a transaction that read first and writes
second can be refused at once with "database is locked" instead of waiting, because
waiting could deadlock. The queue's own transactions therefore start with
``BEGIN IMMEDIATE``: they take the write lock up front, waiting out the busy timeout,
and writers simply line up. What still fails with a lock error is retried whole.
PostgreSQL transactions are retried on deadlock and serialisation failures.

Django 5.1+ can make every transaction of a project immediate with
``OPTIONS["transaction_mode"]``; this does it for the queue's transactions only, on
every supported Django. A queue verb called inside the caller's (deferred) transaction
cannot start it again: it takes the write lock with its first statement instead
(``writing_first``), so that the caller's block waits for the lock rather than fails.
"""

import contextvars
import functools
import logging
import random
import time
from contextlib import contextmanager

from django.db import OperationalError, connections, transaction
from django.db.models import Func, PositiveBigIntegerField
from django.db.models.functions import Now
from django.db.models.sql import Query

from atp.conf import conf

logger = logging.getLogger(__name__)

RETRY_FIRST_DELAY_SECONDS = 0.002
RETRY_MAX_DELAY_SECONDS = 0.25
# SQLSTATEs of a transaction the server rolled back so that it can simply be run again.
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})  # serialization_failure, deadlock
LOCKED_MESSAGES = ("database is locked", "database table is locked")


def configure_sqlite(sender, connection, **kwargs):
    """Switch a new SQLite connection's database to write-ahead logging (``connection_created``)."""
    if connection.vendor != "sqlite" or not conf.SQLITE_WAL:
        return
    if connection.is_in_memory_db():
        return
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        if cursor.fetchone()[0].lower() == "wal":
            return
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
        except OperationalError:
            # Another connection is mid-transaction; a later connection will switch it.
            logger.warning("could not switch %s to WAL yet", connection.settings_dict["NAME"])


def database_now(alias):
    """Return the current time on the database's clock, as an aware datetime.

    One read serves a whole batch of rows, which are then inserted as plain values:
    a ``Now()`` expression per row and column costs more to compile than to insert.
    """
    connection = connections[alias]
    now = Now()
    sql, params = Query(None).get_compiler(connection=connection).compile(now)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {sql}", params)
        value = cursor.fetchone()[0]
    for converter in connection.ops.get_db_converters(now):
        value = converter(value, now, connection)
    return value


class ByteLength(Func):
    """The size in bytes of a stored text, counted by the database (``Length`` counts
    characters), so that a list can show it without fetching the text."""

    function = "OCTET_LENGTH"
    output_field = PositiveBigIntegerField()

    def as_sqlite(self, compiler, connection, **extra_context):
        return self.as_sql(compiler, connection, template="LENGTH(CAST(%(expressions)s AS BLOB))",
                           **extra_context)

    def as_mysql(self, compiler, connection, **extra_context):
        return self.as_sql(compiler, connection, function="LENGTH", **extra_context)


def is_retryable(exc):
    """Return whether a database error only means "busy, run the transaction again"."""
    cause = exc.__cause__
    if getattr(cause, "sqlstate", None) in RETRYABLE_SQLSTATES:
        return True
    message = str(exc).lower()
    return any(text in message for text in LOCKED_MESSAGES)


@contextmanager
def _immediate_begin(connection):
    # Django opens SQLite transactions through this private hook (on 4.2 as on 5.x);
    # overriding it on this one connection, for one transaction, makes it IMMEDIATE.
    def begin_immediate():
        connection.cursor().execute("BEGIN IMMEDIATE")

    connection._start_transaction_under_autocommit = begin_immediate
    try:
        yield
    finally:
        del connection._start_transaction_under_autocommit


@contextmanager
def _outer_transaction(connection, alias):
    if connection.vendor == "sqlite":
        with _immediate_begin(connection), transaction.atomic(using=alias):
            yield
    else:
        with transaction.atomic(using=alias):
            yield


def _holds_immediate_transactions(connection):
    return str(connection.settings_dict.get("OPTIONS", {}).get("transaction_mode", "")).upper() in (
        "IMMEDIATE", "EXCLUSIVE")


def take_write_lock(alias):
    """Inside a caller's transaction on SQLite, take the database's write lock now,
    waiting out the busy timeout, unless the transaction began immediate.

    A deferred SQLite transaction that has read cannot wait for the write lock: when
    another connection writes, its first write fails at once with "database is
    locked" (waiting could deadlock two such readers). A queue verb that reads before
    it writes (the task type, the task's row) would make the caller's block fail;
    taking the lock with a write that changes nothing before reading lets it wait its
    turn like any writer. A block that read before it called the verb is past saving:
    it needs the project's ``transaction_mode`` (``atp.W001`` warns without it).
    """
    connection = connections[alias]
    if (connection.vendor != "sqlite" or not connection.in_atomic_block
            or _holds_immediate_transactions(connection)):
        return
    from atp.models import Type  # atp.models imports from here

    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {Type._meta.db_table} SET id = id WHERE 0")


_retry_budget = contextvars.ContextVar("atp_retry_budget", default=None)


@contextmanager
def retry_budget(seconds):
    """Retry busy databases for at most ``seconds`` inside this block.

    The daemon's supervisor must not sit in one write for the full
    ``ATP_TRANSACTION_RETRY_SECONDS``: it tries again on its next round instead.
    """
    token = _retry_budget.set(seconds)
    try:
        yield
    finally:
        _retry_budget.reset(token)


def run_in_transaction(function, alias, *, single_statement=False):
    """Call ``function()`` in a transaction on ``alias`` and return its result.

    Inside the caller's transaction it runs in a savepoint: its writes commit or roll
    back with the caller's, and an error leaves the caller's transaction usable. On its
    own it runs in a new transaction that is retried while the database is busy, for up
    to ``ATP_TRANSACTION_RETRY_SECONDS``; the last error is raised. A
    ``single_statement`` function (one statement, atomic by itself) runs in autocommit
    mode there: no BEGIN, no COMMIT, one round trip.
    """
    connection = connections[alias]
    if connection.in_atomic_block:
        take_write_lock(alias)
        with transaction.atomic(using=alias):
            return function()
    budget = _retry_budget.get()
    deadline = time.monotonic() + (conf.TRANSACTION_RETRY_SECONDS if budget is None else budget)
    delay = RETRY_FIRST_DELAY_SECONDS
    while True:
        try:
            if single_statement:
                return function()
            with _outer_transaction(connection, alias):
                return function()
        except OperationalError as exc:
            if not is_retryable(exc) or time.monotonic() + delay > deadline:
                raise
            logger.debug("database busy (%s); retrying in %.3f s", exc, delay)
        time.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, RETRY_MAX_DELAY_SECONDS)


def run_once(function, alias):
    """Call ``function()``, a write of one statement, atomically on ``alias``; return its result.

    ``run_in_transaction`` with ``single_statement``: in autocommit mode the statement is
    its own transaction, inside the caller's it runs in a savepoint.
    """
    return run_in_transaction(function, alias, single_statement=True)


def writes(alias_of):
    """Run the decorated queue write through ``run_in_transaction`` on ``alias_of()``."""

    def decorator(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            return run_in_transaction(lambda: function(*args, **kwargs), alias_of())

        return wrapper

    return decorator
