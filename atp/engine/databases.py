"""What differs from one database to the next, asked by the rest of atp instead of the vendor.

A ``Database`` says what a database has beyond Django's ``features`` (which say
whether it has row locks that skip locked rows and ``FOR NO KEY UPDATE``: ask them
there): a wake-up channel, advisory locks, counts it can estimate. And it does what
only it can: the statement that takes its write lock, the errors that mean "run the
transaction again", the session limits of a daemon's connection. ``Database`` is the
portable answer, right for any database Django supports; each database atp knows
better has its subclass here. Nothing outside ``atp.engine`` names a vendor: it asks
``database_of(alias)``.

The engines (``atp.engine.contract``) are the other half: how the queue's verbs are
written. An engine runs on a database; the ORM engine runs on any of them.
"""

import hashlib
import logging
import math
import os
import tempfile
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from django.db import OperationalError, connections

from atp.engine import doorbell

logger = logging.getLogger(__name__)

#: Free space worth giving back to the system (MariaDB/MySQL, SQLite): this much, and
#: more than the space in use.
RECLAIM_MIN_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class TableSize:
    """The space a table takes with its indexes (free space included), and what of it is
    dead; ``table`` None stands for the whole database, where only that is known. A
    figure None is not known on this database."""

    table: object
    bytes: int
    #: Rows in use (an estimate on PostgreSQL and MariaDB/MySQL).
    rows: object = None
    #: Rows deleted or replaced whose space no vacuum has made reusable yet (PostgreSQL).
    dead_rows: object = None
    #: Space allocated to the table (or database) that holds nothing.
    free_bytes: object = None


class Database:
    """A database atp has no special knowledge of: what Django's backend says, and polling."""

    #: How idle daemons learn that tasks became runnable: ``"notify"`` (a channel the
    #: server delivers at commit), ``"doorbell"`` (a datagram to each daemon on this
    #: host, ``atp.engine.doorbell``) or ``"poll"`` (they look every poll interval).
    wakeup = "poll"
    #: Whether the project's own transactions should take the write lock when they begin
    #: (``atp.W001``): a deferred one that read first cannot wait for it when it writes.
    needs_immediate_transactions = False
    #: Whether a count of many rows is better estimated than counted (the admin's lists).
    estimates_counts = False
    #: The connection character sets that cannot carry every character a task's inputs
    #: may hold (``atp.W003``).
    narrow_charsets = frozenset()
    #: SQLSTATEs of a transaction the server rolled back so that it can simply run again
    #: (serialization failure, deadlock: the SQL standard's and PostgreSQL's).
    retryable_sqlstates = frozenset({"40001", "40P01"})

    def configure(self, connection):
        """Set up a new connection of the project's (``connection_created``)."""

    def begin(self, connection):
        """A context in which the queue's own transactions begin on ``connection``."""
        return nullcontext()

    def take_write_lock(self, connection):
        """Inside a caller's transaction, take the write lock before the verb reads."""

    def is_retryable(self, exc):
        """Whether the database error ``exc`` only means "busy: run the transaction again"."""
        return getattr(exc.__cause__, "sqlstate", None) in self.retryable_sqlstates

    def harden(self, settings_dict):
        """Add to a daemon's connection settings what makes a lost server fail fast."""

    #: Whether the server ends a session idle in a transaction (``limit_waits``): a
    #: daemon frozen between two statements then holds its locks no longer than that.
    ends_idle_transactions = False

    def limit_waits(self, cursor, *, lock_wait_seconds, statement_seconds,
                    idle_in_transaction_seconds):
        """Bound, for this session, how long a statement waits for a lock or runs, and,
        where the server can (``ends_idle_transactions``), how long the session may sit
        idle inside a transaction before the server ends it and its locks."""

    def read_snapshot(self, cursor):
        """Make the transaction just begun on ``cursor`` read one snapshot (invariants)."""

    def lock_counting(self, cursor, key):
        """Serialise, until the transaction ends, the enqueues that count the queue under
        ``key`` (two integers); return False where the caller must lock a row instead."""
        return False

    def doorbell_directory(self, connection):
        """Where the daemons of this host listen for a wake-up, for the ``doorbell``."""
        return None

    def notify(self, connection, channel):
        """Send a wake-up on ``channel`` in the current transaction (``"notify"``)."""

    def listen(self, connection, channel):
        """Open a connection of its own that LISTENs on ``channel``; return it (``"notify"``)."""
        raise NotImplementedError

    def force_claim_index(self, cursor, sql, table, index):
        """Return the ORM claim's ``sql`` so that it walks ``index`` (after any setting
        it needs on ``cursor`` for the transaction)."""
        return sql

    def estimate_count(self, cursor, sql, params):
        """Return the planner's estimate of the rows ``sql`` returns (``estimates_counts``)."""
        raise NotImplementedError

    @contextmanager
    def time_limit(self, cursor, milliseconds):
        """Bound the statements run inside to ``milliseconds`` each, where the database can."""
        yield

    def set_table_storage(self, schema_editor, table, options):
        """Set the storage parameters ``options`` (name: value) of ``table``, where the
        database has them (a migration's)."""

    def table_sizes(self, cursor, tables):
        """Return the ``TableSize`` of each of ``tables`` (or of the whole database),
        or None where the database does not say (``manage.py atp doctor``)."""
        return None

    def space_remedy(self, size):
        """Return the statement, and when to run it, that gives back the dead space of
        ``size`` (a ``TableSize``), or "" while that space is not worth it."""
        return ""

    def reset_table_storage(self, schema_editor, table, names):
        """Reset the storage parameters ``names`` of ``table`` (a migration's reverse)."""


class PostgreSQL(Database):
    wakeup = "notify"
    estimates_counts = True
    #: A daemon's connection: give up connecting after 10 s, and notice a dead server
    #: within about 25 s of silence (TCP keepalives), unless the project says otherwise.
    connection_defaults = {
        "connect_timeout": 10,
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
    }

    def harden(self, settings_dict):
        options = settings_dict.setdefault("OPTIONS", {})
        for name, value in self.connection_defaults.items():
            options.setdefault(name, value)

    ends_idle_transactions = True

    def limit_waits(self, cursor, *, lock_wait_seconds, statement_seconds,
                    idle_in_transaction_seconds):
        cursor.execute(f"SET statement_timeout = '{int(statement_seconds)}s'")
        cursor.execute("SET idle_in_transaction_session_timeout = "
                       f"'{max(1, round(idle_in_transaction_seconds * 1000))}ms'")

    def read_snapshot(self, cursor):
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def lock_counting(self, cursor, key):
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", list(key))
        return True

    def notify(self, connection, channel):
        with connection.cursor() as cursor:
            cursor.execute(f"NOTIFY {channel}")

    def listen(self, connection, channel):
        import psycopg

        listener = psycopg.connect(**connection.get_connection_params(), autocommit=True)
        listener.execute(f"LISTEN {channel}")
        return listener

    def force_claim_index(self, cursor, sql, table, index):
        from atp.engine.postgresql import CLAIM_PLAN

        cursor.execute(CLAIM_PLAN)
        return sql

    def estimate_count(self, cursor, sql, params):
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        return int(cursor.fetchone()[0][0]["Plan"]["Plan Rows"])

    @contextmanager
    def time_limit(self, cursor, milliseconds):
        cursor.execute("SHOW statement_timeout")
        previous = cursor.fetchone()[0]
        cursor.execute(f"SET LOCAL statement_timeout = {int(milliseconds)}")
        yield
        cursor.execute("SELECT set_config('statement_timeout', %s, true)", [previous])

    def set_table_storage(self, schema_editor, table, options):
        settings = ", ".join(f"{name} = {value}" for name, value in options.items())
        schema_editor.execute(f"ALTER TABLE {table} SET ({settings})")

    def reset_table_storage(self, schema_editor, table, names):
        schema_editor.execute(f"ALTER TABLE {table} RESET ({', '.join(names)})")

    def table_sizes(self, cursor, tables):
        cursor.execute(
            "SELECT relname, pg_total_relation_size(relid), n_live_tup, n_dead_tup "
            "FROM pg_stat_user_tables WHERE relname = ANY(%s) "
            "AND schemaname = ANY(current_schemas(false)) ORDER BY relname", [list(tables)])
        return [TableSize(name, size, rows=live, dead_rows=dead)
                for name, size, live, dead in cursor.fetchall()]

    def space_remedy(self, size):
        # The rule by which a daemon vacuums the queue table itself (atp.engine.upkeep).
        from atp.engine.upkeep import VACUUM, VACUUM_MIN_DEAD

        if size.dead_rows is None or not (size.dead_rows >= VACUUM_MIN_DEAD
                                          and size.dead_rows > (size.rows or 0)):
            return ""
        return (f"{VACUUM} {size.table}: autovacuum lags behind it (is it on? "
                "see docs/performance.md); it does not block the queue")


class SQLite(Database):
    wakeup = "doorbell"
    needs_immediate_transactions = True
    #: Errors of a busy database: another connection holds the write lock.
    locked_messages = ("database is locked", "database table is locked")

    def configure(self, connection):
        """Switch the database to write-ahead logging (``ATP_SQLITE_WAL``)."""
        from atp.conf import conf

        if not conf.SQLITE_WAL or connection.is_in_memory_db():
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

    @contextmanager
    def begin(self, connection):
        # Django opens SQLite transactions through this private hook (on 4.2 as on 5.x);
        # overriding it on this one connection, for one transaction, makes it IMMEDIATE:
        # it takes the write lock up front, waiting out the busy timeout, and writers
        # line up instead of failing.
        def begin_immediate():
            connection.cursor().execute("BEGIN IMMEDIATE")

        connection._start_transaction_under_autocommit = begin_immediate
        try:
            yield
        finally:
            del connection._start_transaction_under_autocommit

    def take_write_lock(self, connection):
        """A deferred SQLite transaction that has read cannot wait for the write lock: when
        another connection writes, its first write fails at once with "database is
        locked". A write that changes nothing, before the verb reads, makes the caller's
        block wait its turn like any writer's (unless it began immediate already)."""
        mode = connection.settings_dict.get("OPTIONS", {}).get("transaction_mode", "")
        if str(mode).upper() in ("IMMEDIATE", "EXCLUSIVE"):
            return
        from atp.models import Type  # atp.models imports atp.db, which asks here

        with connection.cursor() as cursor:
            cursor.execute(f"UPDATE {Type._meta.db_table} SET id = id WHERE 0")

    def is_retryable(self, exc):
        message = str(exc).lower()
        return any(text in message for text in self.locked_messages)

    def limit_waits(self, cursor, *, lock_wait_seconds, statement_seconds,
                    idle_in_transaction_seconds):
        # No server to end a frozen process's transaction: it holds the write lock until
        # it thaws (docs/daemon.md).
        cursor.execute(f"PRAGMA busy_timeout = {int(lock_wait_seconds * 1000)}")

    def lock_counting(self, cursor, key):
        return True  # its one write lock serialises every writer already

    def doorbell_directory(self, connection):
        if connection.is_in_memory_db():
            return None
        name = Path(os.fspath(connection.settings_dict["NAME"]))
        return name.resolve().with_name(name.name + doorbell.SUFFIX)

    def force_claim_index(self, cursor, sql, table, index):
        forced = sql.replace(f"FROM {table} ", f"FROM {table} INDEXED BY {index} ", 1)
        assert forced != sql, sql
        return forced

    def table_sizes(self, cursor, tables):
        """The whole database file: SQLite counts pages, not tables (without dbstat)."""
        figures = []
        for pragma in ("page_count", "page_size", "freelist_count"):
            cursor.execute(f"PRAGMA {pragma}")
            figures.append(cursor.fetchone()[0])
        pages, page_size, free_pages = figures
        return [TableSize(None, pages * page_size, free_bytes=free_pages * page_size)]

    def space_remedy(self, size):
        if not _worth_reclaiming(size):
            return ""
        return ("VACUUM: it rewrites the whole file and holds the write lock while it "
                "runs, so stop the daemons first (or set PRAGMA auto_vacuum = INCREMENTAL "
                "once, with a VACUUM, and run PRAGMA incremental_vacuum now and then)")


class MySQL(Database):
    """MariaDB ≥ 10.6 and MySQL ≥ 8 (InnoDB): row locks with ``SKIP LOCKED``, and no
    notification channel: the daemons on the enqueuer's host are woken by the doorbell,
    those on other hosts find new tasks at their next poll."""

    wakeup = "doorbell"
    #: MySQL's 3-byte "utf8" (Django 4.2's default connection character set) has no
    #: characters beyond the Basic Multilingual Plane: an emoji in inputs is refused.
    narrow_charsets = frozenset({"utf8", "utf8mb3"})

    #: Error codes of a transaction InnoDB rolled back (deadlock) or gave up waiting in
    #: (lock wait timeout): run it again.
    retryable_codes = frozenset({1213, 1205})

    def is_retryable(self, exc):
        args = getattr(exc.__cause__, "args", None) or (None,)
        return args[0] in self.retryable_codes

    def harden(self, settings_dict):
        settings_dict.setdefault("OPTIONS", {}).setdefault("connect_timeout", 10)

    ends_idle_transactions = True

    def limit_waits(self, cursor, *, lock_wait_seconds, statement_seconds,
                    idle_in_transaction_seconds):
        cursor.execute(f"SET SESSION innodb_lock_wait_timeout = {max(1, round(lock_wait_seconds))}")
        idle = max(1, math.ceil(idle_in_transaction_seconds))
        if cursor.db.mysql_is_mariadb:
            cursor.execute(f"SET SESSION max_statement_time = {float(statement_seconds)}")
            cursor.execute(f"SET SESSION idle_transaction_timeout = {idle}")
        else:
            cursor.execute(f"SET SESSION max_execution_time = {int(statement_seconds * 1000)}")
            # MySQL ends no idle transaction as such, only an idle connection: a daemon
            # queries at least every heartbeat, well within its time-out.
            cursor.execute(f"SET SESSION wait_timeout = {idle}")

    def doorbell_directory(self, connection):
        """A directory of this host's temporary files named after the server and the
        database: every process of this host using that database rings there."""
        settings = connection.settings_dict
        served = f"{settings.get('HOST') or 'localhost'}:{settings.get('PORT') or 3306}/{settings['NAME']}"
        digest = hashlib.sha256(served.encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"atp-mysql-{digest}{doorbell.SUFFIX}"

    def read_snapshot(self, cursor):
        # The transaction begins at its first statement: this one sets it.
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")

    def table_sizes(self, cursor, tables):
        tables = list(tables)
        cursor.execute(
            "SELECT table_name, data_length + index_length + data_free, table_rows, data_free "
            "FROM information_schema.tables WHERE table_schema = DATABASE() "
            f"AND table_name IN ({', '.join(['%s'] * len(tables))}) ORDER BY table_name",
            tables)
        return [TableSize(name, int(size), rows=rows, free_bytes=int(free))
                for name, size, rows, free in cursor.fetchall()]

    def space_remedy(self, size):
        if not _worth_reclaiming(size):
            return ""
        return (f"OPTIMIZE TABLE {size.table}: it rebuilds the table (online in InnoDB, "
                "but it reads and writes all of it): run it when the queue is quiet")

    def force_claim_index(self, cursor, sql, table, index):
        forced = sql.replace(f"FROM {table} ", f"FROM {table} FORCE INDEX ({index}) ", 1)
        assert forced != sql, sql
        return forced


def _worth_reclaiming(size):
    free = size.free_bytes or 0
    return free >= RECLAIM_MIN_BYTES and free > size.bytes - free


#: The databases atp knows, by Django's vendor name.
BY_VENDOR = {"postgresql": PostgreSQL(), "sqlite": SQLite(), "mysql": MySQL()}
PORTABLE = Database()


def database_of(alias_or_connection):
    """Return the ``Database`` of a connection, or of the database ``alias``."""
    connection = (connections[alias_or_connection] if isinstance(alias_or_connection, str)
                  else alias_or_connection)
    return BY_VENDOR.get(connection.vendor, PORTABLE)
