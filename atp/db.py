"""Transactions for the queue verbs: retried while the database is busy.

What differs from one database to the next is asked of its ``Database``
(``atp.engine.databases``): how the queue's own transactions begin (on SQLite
``BEGIN IMMEDIATE``: SQLite has one writer at a time, and a deferred transaction that
read first and writes second can be refused at once with "database is locked" instead
of waiting, so the queue's transactions take the write lock up front and writers line
up), which errors mean "run it again" (a deadlock or serialisation failure, a locked
SQLite database), and the write lock a queue verb takes first inside a caller's
(deferred) transaction, so that the caller's block waits for the lock rather than
fails. Django 5.1+ can make every transaction of a project immediate with
``OPTIONS["transaction_mode"]`` (``atp.W001``)."""

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


def _database(connection):
    from atp.engine.databases import database_of  # the engine's models import from here

    return database_of(connection)


def configure_connection(sender, connection, **kwargs):
    """Set up a new connection as its database needs (``connection_created``): SQLite
    switches to write-ahead logging."""
    _database(connection).configure(connection)


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


def is_retryable(exc, alias=None):
    """Return whether a database error only means "busy, run the transaction again", on
    ``alias`` (the queue's database by default)."""
    if alias is None:
        from atp.engine.base import database

        alias = database()
    return _database(connections[alias]).is_retryable(exc)


def take_write_lock(alias):
    """Inside a caller's transaction, take the database's write lock now, where it has
    one to take (SQLite, unless the transaction began immediate): a queue verb that
    reads before it writes must not make the caller's block fail (see
    ``atp.engine.databases.SQLite.take_write_lock``). A block that read before it called
    the verb is past saving: it needs the project's ``transaction_mode`` (``atp.W001``)."""
    connection = connections[alias]
    if connection.in_atomic_block:
        _database(connection).take_write_lock(connection)


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
            with _database(connection).begin(connection), transaction.atomic(using=alias):
                return function()
        except OperationalError as exc:
            if not is_retryable(exc, alias) or time.monotonic() + delay > deadline:
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
