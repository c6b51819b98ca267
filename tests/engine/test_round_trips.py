"""An idle daemon's lone claim, its settle and its look at the next due task are each one
round trip on PostgreSQL: the planner settings (or the locks of ``lock_round``) and the
statement go out together in psycopg's pipeline mode, one transaction that the server
commits at the Sync, with no BEGIN and no COMMIT of their own.

What goes over the wire is read from libpq's own trace of the connection: each answer
the daemon waits for ends with a ReadyForQuery."""

import contextlib
import tempfile

import pytest
from django.db import IntegrityError, connection, transaction

import atp
from atp.engine import claim as claims
from atp.engine import records
from atp.engine.engines import engine
from atp.engine.outcomes import Outcome
from atp.engine.postgresql import SQL, _together, statement_cursor
from atp.models import Instance, LogRecord
from atp.states import Status

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _postgresql_engine(postgres_only):
    if engine().name != "postgresql":
        pytest.skip("the PostgreSQL engine's rounds")


@contextlib.contextmanager
def _wire():
    """Yield a list filled, when the block ends, with the messages the connection sent
    ("F") and received ("B") while it ran, as libpq traces them: (direction, type, text)."""
    from psycopg import pq

    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    messages = []
    with tempfile.TemporaryFile() as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield messages
        finally:
            pgconn.untrace()
            trace.seek(0)
            for line in trace.read().decode().splitlines():
                fields = line.split("\t")
                if fields[0] in ("F", "B") and len(fields) > 2:  # else a query's next line
                    messages.append((fields[0], fields[2], " ".join(fields[3:])))


def _answers(messages):
    return sum(1 for direction, kind, _ in messages if (direction, kind) == ("B", "ReadyForQuery"))


def _transaction_commands(messages):
    return [text for direction, kind, text in messages
            if direction == "F" and kind == "Query" and ("BEGIN" in text or "COMMIT" in text)]


def test_a_lone_claim_is_one_round_trip(noop_type, daemon):
    queued = atp.enqueue("tests.noop")
    with _wire() as messages:
        [claimed] = claims.claim_for_daemon(daemon, 1, [noop_type.pk], start=1)
    assert claimed.pk == queued.pk
    assert (_answers(messages), _transaction_commands(messages)) == (1, [])
    assert Instance.objects.get(pk=queued.pk).status == Status.RUNNING  # committed


def test_a_lone_settle_and_the_next_claim_are_one_round_trip(noop_type, daemon):
    first, second = atp.enqueue("tests.noop"), atp.enqueue("tests.noop")
    [running] = claims.claim_for_daemon(daemon, 1, [noop_type.pk], start=1)
    with _wire() as messages:
        settled, [claimed] = claims.settle_and_claim(
            daemon, [Outcome(running.pk, running.attempt, Status.FINISHED)], 1,
            [noop_type.pk], start=1)
    assert (settled, claimed.pk) == ({first.pk}, second.pk)
    assert (_answers(messages), _transaction_commands(messages)) == (1, [])
    assert Instance.objects.get(pk=first.pk).status == Status.FINISHED
    assert LogRecord.objects.filter(instance_id=first.pk, status=Status.FINISHED).count() == 1


def test_the_next_due_time_is_one_round_trip(noop_type):
    atp.enqueue("tests.noop", countdown=30)
    with _wire() as messages:
        due = claims.next_due([noop_type.pk], 60)
    assert 0 < due <= 30
    assert (_answers(messages), _transaction_commands(messages)) == (1, [])


def test_the_statements_sent_together_share_one_transaction():
    connection.ensure_connection()
    with statement_cursor(connection) as cursor:
        with _together(connection, cursor):
            cursor.execute("SELECT set_config('atp.probe', 'set', true)")
            cursor.execute("SELECT current_setting('atp.probe', true)")
        during = cursor.fetchone()[0]
        cursor.execute("SELECT current_setting('atp.probe', true)")
        after = cursor.fetchone()[0]
    # Set for the transaction the first statement began: the second ran in it, and it ended.
    assert (during, after) == ("set", "")


def test_a_failure_in_the_second_statement_undoes_the_first(noop_type):
    queued = atp.enqueue("tests.noop", identifier="job-1")
    with statement_cursor(connection) as cursor:
        with pytest.raises(IntegrityError):  # Django's error, as from any other statement
            with _together(connection, cursor):
                cursor.execute("UPDATE atp_instance SET priority = 7 WHERE id = %s", [queued.pk])
                cursor.execute("INSERT INTO atp_instance (id) VALUES (%s)", [queued.pk])
    assert Instance.objects.get(pk=queued.pk).priority == 0
    with transaction.atomic():  # and the connection goes on
        assert Instance.objects.filter(pk=queued.pk).exists()


def test_statements_left_unrun_by_a_failure_run_the_next_time():
    """The statement after a failure in a pipeline is never run, nor prepared: the next
    round must not take it for prepared on the server."""
    from django.db import DataError

    with statement_cursor(connection) as cursor:
        for divisor, fails in ((0, True), (1, False), (0, True), (1, False), (1, False)):
            try:
                with _together(connection, cursor):
                    cursor.execute("SELECT 1 / %s::int", [divisor])
                    cursor.execute("SELECT %s::int + 1", [divisor])
            except DataError:
                assert fails
            else:
                assert not fails and cursor.fetchone() == (2,)


def test_the_longest_statements_are_not_read_again_at_each_run(noop_type, daemon, monkeypatch):
    """psycopg reads a statement's placeholders anew at every run when it is over 4 KiB
    (it caches shorter ones), as a settle with the next claim is: the engine sends its
    statements numbered, read once (``statements.numbered``)."""
    from psycopg import _queries

    assert len(SQL["settle_and_claim"]) > _queries.MAX_CACHED_STATEMENT_LENGTH
    for _ in range(3):
        atp.enqueue("tests.noop")
    [task] = claims.claim_for_daemon(daemon, 1, [noop_type.pk], start=1)
    reads, read = [], _queries._query2pg_nocache
    monkeypatch.setattr(_queries, "_query2pg_nocache",
                        lambda query, encoding: reads.append(query) or read(query, encoding))
    for _ in range(2):
        _, [task] = claims.settle_and_claim(
            daemon, [Outcome(task.pk, task.attempt, Status.FINISHED)], 1, [noop_type.pk], start=1)
    assert reads == []


def test_a_handlers_history_line_and_its_progress_are_one_round_trip_each(noop_type, daemon):
    """Each one statement, prepared at its first run on the connection (a round trip of
    its own then); they were five round trips and three, in a transaction each."""
    atp.enqueue("tests.noop")
    [running] = claims.claim_for_daemon(daemon, 1, [noop_type.pk], start=1)
    records.log(running.pk, "begun", attempt=running.attempt, daemon="host:1")
    records.set_progress(running.pk, 0, 2, "begun", attempt=running.attempt)
    with _wire() as messages:
        records.log(running.pk, "halfway", attempt=running.attempt, daemon="host:1")
    assert (_answers(messages), _transaction_commands(messages)) == (1, [])
    with _wire() as messages:
        records.set_progress(running.pk, 1, 2, "halfway", attempt=running.attempt)
    assert (_answers(messages), _transaction_commands(messages)) == (1, [])
    stored = Instance.objects.get(pk=running.pk)
    assert (stored.progress_done, stored.progress_total, stored.progress_message) == (1, 2, "halfway")
    assert LogRecord.objects.filter(instance_id=running.pk, message="halfway",
                                    attempt=running.attempt, daemon="host:1").count() == 1
