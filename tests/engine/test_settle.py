"""The daemon's batched verbs: a claim that starts what it takes, and ``settle``, which
writes the ends of many attempts together, each guarded and fenced on its own."""

import dataclasses

import pytest
from django.test import override_settings

import atp
from atp import engine
from atp.engine.lifecycle import settle
from atp.engine.outcomes import Outcome
from atp.exceptions import ResponseTooLarge
from atp.models import Instance, LogRecord, Response, Task
from atp.states import Status
from tests.factories import claim_exactly, snapshot

pytestmark = pytest.mark.django_db


def history(instance):
    return list(LogRecord.objects.filter(instance_id=instance.pk).order_by("id")
                .values_list("status", "attempt", "message", "daemon"))


def running(instance, daemon):
    claimed = claim_exactly(instance, daemon)
    engine.start(claimed, attempt=claimed.attempt, daemon=daemon)
    return claimed


@pytest.mark.parametrize("limited", [False, True], ids=["plain", "concurrency-limited"])
def test_a_claim_that_starts_returns_running_tasks_with_their_inputs(db, daemon, limited):
    atp.register_task_type("tests.echo", "tests.handlers.echo",
                           max_concurrency=5 if limited else None)
    first = atp.enqueue("tests.echo", {"n": 1}, priority=1)
    second = atp.enqueue("tests.echo", {"n": 2})
    type_ids = [first.type_id]
    claimed = engine.claim_for_daemon(daemon, 3, type_ids, start=3)
    assert [task.pk for task in claimed] == [first.pk, second.pk]
    assert [task.inputs.load() for task in claimed] == [{"n": 1}, {"n": 2}]
    for task in claimed:
        stored = Instance.objects.get(pk=task.pk)
        assert (stored.status, stored.attempt, stored.daemon_id) == (Status.RUNNING, 1, daemon.pk)
        assert stored.started is not None and task.status == Status.RUNNING
        assert Task.objects.get(pk=task.pk).daemon_id == daemon.pk
        assert [step[:2] for step in history(task)] == [
            (Status.ACCEPTED, 0), (Status.SCHEDULED, 1), (Status.RUNNING, 1)]


def test_a_claim_that_does_not_start_leaves_the_tasks_scheduled(noop_type, daemon):
    queued = atp.enqueue("tests.noop")
    [claimed] = engine.claim_for_daemon(daemon, 1, [noop_type.pk])
    stored = Instance.objects.get(pk=queued.pk)
    assert (stored.status, stored.started) == (Status.SCHEDULED, None)
    assert claimed.status == Status.SCHEDULED


@pytest.mark.parametrize("limited", [False, True], ids=["plain", "concurrency-limited"])
def test_a_claim_starts_only_its_first_tasks_and_loads_the_inputs_of_all(db, daemon, limited):
    """The supervisor starts at once what its idle workers take; the rest it prefetches
    for its workers' queues: SCHEDULED, leased, loaded, in claim order after them."""
    atp.register_task_type("tests.echo", "tests.handlers.echo",
                           max_concurrency=5 if limited else None)
    tasks = [atp.enqueue("tests.echo", {"n": n}, priority=3 - n) for n in range(3)]
    claimed = engine.claim_for_daemon(daemon, 3, [tasks[0].type_id], start=1)
    assert [task.pk for task in claimed] == [task.pk for task in tasks]
    assert [task.inputs.load() for task in claimed] == [{"n": n} for n in range(3)]
    assert [task.status for task in claimed] == [
        Status.RUNNING, Status.SCHEDULED, Status.SCHEDULED]
    stored = Instance.objects.in_bulk([task.pk for task in tasks])
    assert [stored[task.pk].status for task in tasks] == [
        Status.RUNNING, Status.SCHEDULED, Status.SCHEDULED]
    assert stored[tasks[1].pk].started is None
    assert [len(history(task)) for task in tasks] == [3, 2, 2]
    assert Task.objects.filter(daemon=daemon).count() == 3


def test_a_claim_refuses_a_start_that_is_no_count(noop_type, daemon):
    atp.enqueue("tests.noop")
    for start in (True, -1, 1.0):
        with pytest.raises(ValueError, match="non-negative number of tasks"):
            engine.claim_for_daemon(daemon, 1, [noop_type.pk], start=start)
    assert Task.objects.filter(daemon__isnull=False).count() == 0


def test_settle_writes_the_start_a_prefetched_task_had_with_its_end_or_alone(noop_type, daemon):
    """A task a worker took from its queue started before its start was written: the
    write moves it through RUNNING, dated when it started, to its end; a task still
    running gets its start alone, and keeps its lease."""
    ended, failed, still = (atp.enqueue("tests.noop") for _ in range(3))
    claimed = engine.claim_for_daemon(daemon, 3, [noop_type.pk], start=0)
    assert {task.status for task in claimed} == {Status.SCHEDULED}
    written = settle(daemon, [
        Outcome.finished(ended.pk, 1, "done").since_start(0.2),
        Outcome.failed(failed.pk, 1, "Traceback: boom").since_start(0.1),
        Outcome.started(still.pk, 1, 0.3),
    ])
    assert written == {ended.pk, failed.pk, still.pk}
    rows = Instance.objects.in_bulk([ended.pk, failed.pk, still.pk])
    assert [rows[pk].status for pk in (ended.pk, failed.pk, still.pk)] == [
        Status.FINISHED, Status.FAILED, Status.RUNNING]
    assert rows[still.pk].finished is None
    for task in (ended, failed, still):
        steps = list(LogRecord.objects.filter(instance_id=task.pk).order_by("time", "id")
                     .values_list("status", "time"))
        assert [status for status, _ in steps][:3] == [
            Status.ACCEPTED, Status.SCHEDULED, Status.RUNNING]
        scheduled_at, started_at = steps[1][1], steps[2][1]
        assert scheduled_at <= started_at == rows[task.pk].started
        if task is not still:  # (the orm engine dates the row and its entry apart)
            assert started_at < rows[task.pk].finished and started_at < steps[3][1]
    assert history(ended)[-1] == (Status.FINISHED, 1, "", str(daemon))
    assert history(failed)[-1] == (Status.FAILED, 1, "Traceback: boom", str(daemon))
    assert atp.get_response(ended).text == "done"
    assert list(Task.objects.filter(daemon=daemon).values_list("pk", flat=True)) == [still.pk]
    # Started once: its start is not written twice, and its end is an ordinary one now.
    assert settle(daemon, [Outcome.started(still.pk, 1, 0.5)]) == set()
    assert settle(daemon, [Outcome.finished(still.pk, 1, None)]) == {still.pk}


@pytest.mark.parametrize("with_claim", [False, True], ids=["settle", "settle and claim"])
def test_two_outcomes_of_one_task_in_one_batch_are_refused_before_writing(
        noop_type, daemon, with_claim):
    """A batch holds one outcome per task (a start not written goes with its end): an
    engine that writes a batch in one statement would write one of two and lose the
    other (PostgreSQL's wrote the start and left the task RUNNING, its end lost)."""
    task, other = atp.enqueue("tests.noop"), atp.enqueue("tests.noop")
    engine.claim_for_daemon(daemon, 2, [noop_type.pk], start=0)
    batch = [Outcome.finished(other.pk, 1, None).since_start(0.1),
             Outcome.started(task.pk, 1, 0.3), Outcome.finished(task.pk, 1, "done")]
    with pytest.raises(ValueError, match=rf"one per task, not several of task\(s\) #{task.pk}$"):
        if with_claim:
            engine.settle_and_claim(daemon, batch, 1, [noop_type.pk], start=1)
        else:
            settle(daemon, batch)
    assert set(Instance.objects.values_list("status", flat=True)) == {Status.SCHEDULED}
    assert settle(daemon, [Outcome.finished(task.pk, 1, "done").since_start(0.3)]) == {task.pk}


def test_an_end_with_a_start_already_written_ends_the_task_once_started(noop_type, daemon):
    """A round wrote a start but its answer was lost (the connection went): the end,
    sent again with its start, is written as an end alone."""
    task = atp.enqueue("tests.noop")
    engine.claim_for_daemon(daemon, 1, [noop_type.pk], start=0)
    assert settle(daemon, [Outcome.started(task.pk, 1, 0.01)]) == {task.pk}
    started = Instance.objects.get(pk=task.pk).started
    assert settle(daemon, [Outcome.finished(task.pk, 1, "ok").since_start(0.02)]) == {task.pk}
    stored = Instance.objects.get(pk=task.pk)
    assert (stored.status, stored.started) == (Status.FINISHED, started)
    assert [step[0] for step in history(task)] == [
        Status.ACCEPTED, Status.SCHEDULED, Status.RUNNING, Status.FINISHED]


def test_settle_refuses_the_start_of_a_prefetched_task_an_operator_took(noop_type, daemon):
    cancelled, superseded, good = (atp.enqueue("tests.noop") for _ in range(3))
    engine.claim_for_daemon(daemon, 3, [noop_type.pk], start=0)
    atp.cancel(cancelled)
    engine.restart(superseded, "daemon lost", attempt=1)
    claim_exactly(superseded, engine.register_daemon())  # SCHEDULED again, on attempt 2
    before = [snapshot(task) for task in (cancelled, superseded)]
    written = settle(daemon, [
        Outcome.finished(cancelled.pk, 1, None).since_start(0.1),
        Outcome.started(superseded.pk, 1, 0.1),
        Outcome.started(good.pk, 1, 0.1),
    ])
    assert written == {good.pk}
    assert [snapshot(task) for task in (cancelled, superseded)] == before


def test_settle_writes_each_end_with_its_history_and_its_response(noop_type, daemon):
    done, broken = atp.enqueue("tests.noop"), atp.enqueue("tests.noop")
    for task in (done, broken):
        running(task, daemon)
    written = settle(daemon, [
        Outcome.finished(done.pk, 1, "all good"),
        Outcome.failed(broken.pk, 1, "Traceback: ValueError"),
    ])
    assert written == {done.pk, broken.pk}
    assert Instance.objects.get(pk=done.pk).status == Status.FINISHED
    failed = Instance.objects.get(pk=broken.pk)
    assert failed.status == Status.FAILED and failed.finished is not None
    assert not Task.objects.filter(pk__in=[done.pk, broken.pk]).exists()
    assert history(done)[-1] == (Status.FINISHED, 1, "", str(daemon))
    assert history(broken)[-1] == (Status.FAILED, 1, "Traceback: ValueError", str(daemon))
    response = Response.objects.get(instance_id=done.pk)
    assert (response.text, response.content_type, response.charset, response.size) == (
        "all good", "text/plain", "utf-8", 8)
    assert not Response.objects.filter(instance_id=broken.pk).exists()


def test_settle_writes_nothing_for_an_attempt_that_went_on_and_the_rest_all_the_same(
        noop_type, daemon):
    superseded, cancelled, requeued, good = (atp.enqueue("tests.noop") for _ in range(4))
    for task in (superseded, cancelled, requeued, good):
        running(task, daemon)
    engine.restart(superseded, "daemon lost", attempt=1)
    other = engine.register_daemon()
    claim_exactly(superseded, other)
    engine.start(superseded, attempt=2, daemon=other)  # RUNNING and leased, on attempt 2
    atp.cancel(cancelled)  # the lease stays until the worker is stopped
    atp.reenqueue(requeued)
    refused = (superseded, cancelled, requeued)
    before = [snapshot(task) for task in refused]
    written = settle(daemon, [
        *(Outcome.finished(task.pk, 1, "late") for task in refused),
        Outcome.failed(good.pk, 1, "its own failure"),
    ])
    assert written == {good.pk}
    assert [snapshot(task) for task in refused] == before
    assert not Response.objects.filter(instance_id__in=[task.pk for task in refused]).exists()
    assert Instance.objects.get(pk=good.pk).status == Status.FAILED


def test_settle_refuses_a_finish_of_a_task_that_has_not_started(noop_type, daemon):
    scheduled = claim_exactly(atp.enqueue("tests.noop"), daemon)
    before = snapshot(scheduled)
    assert settle(daemon, [Outcome.finished(scheduled.pk, 1, None)]) == set()
    assert snapshot(scheduled) == before
    # A failure may end it before it starts (its inputs could not be read, say).
    assert settle(daemon, [Outcome.failed(scheduled.pk, 1, "no inputs")]) == {scheduled.pk}


def test_settle_of_nothing_writes_nothing(noop_type, daemon, django_assert_num_queries):
    with django_assert_num_queries(0):
        assert settle(daemon, []) == set()


@override_settings(ATP_MAX_RESPONSE_BYTES=10)
def test_an_outcome_checks_its_response_where_it_is_made():
    with pytest.raises(ResponseTooLarge, match="11 bytes, more than the 10 bytes"):
        Outcome.finished(1, 1, b"x" * 11)
    assert Outcome.finished(1, 1, b"x" * 20, max_bytes=20).response[0] == b"x" * 20
    with pytest.raises(ValueError, match="an attempt ends"):
        Outcome(1, 1, Status.RUNNING)
    with pytest.raises(ValueError, match="whose start is not written moves to"):
        Outcome(1, 1, Status.ACCEPTED, started_ago=0.5)
    with pytest.raises(ValueError, match="a number of seconds"):
        Outcome(1, 1, Status.RUNNING, started_ago=-1)
    handed_back = Outcome.handed_back(1, 1, "not ours")
    assert handed_back.since_start(2.0) is handed_back  # it never ran: no start to write
    failed = Outcome.failed(1, 1, "boom", may_retry=True, countdown=3.0)
    dated = failed.since_start(2.5)
    assert dated == dataclasses.replace(failed, started_ago=2.5) and dated is not failed
    assert failed.started_ago is None and hash(dated) == hash(dataclasses.replace(dated))
    assert failed.since_start(-1.0).started_ago == 0.0  # a clock read after the end
    with pytest.raises(dataclasses.FrozenInstanceError):
        dated.started_ago = 1.0


@pytest.mark.parametrize("limited, known", [(False, False), (True, False), (True, True)],
                         ids=["plain", "concurrency-limited", "concurrency-limited, known"])
def test_settle_and_claim_writes_the_ends_and_starts_the_next_tasks(db, daemon, limited, known):
    """``known``: the daemon says a type it serves has a limit (the claim within limits
    then counts, in the same statement, the leases its settle ends)."""
    atp.register_task_type("tests.echo", "tests.handlers.echo",
                           max_concurrency=2 if limited else None)
    done = atp.enqueue("tests.echo", priority=5)
    waiting = [atp.enqueue("tests.echo", {"n": n}) for n in range(3)]
    running(done, daemon)
    settled, claimed = engine.settle_and_claim(
        daemon, [Outcome.finished(done.pk, 1, {"ok": True})], 5, [done.type_id], start=5,
        limited=known)
    assert settled == {done.pk}
    assert Instance.objects.get(pk=done.pk).status == Status.FINISHED
    assert atp.get_response(done).json() == {"ok": True}
    # Its end freed a slot of a limited type: the claim counts it.
    expected = waiting[:2] if limited else waiting
    assert [task.pk for task in claimed] == [task.pk for task in expected]
    assert [task.inputs.load() for task in claimed] == [
        {"n": n} for n in range(len(expected))]
    assert {Instance.objects.get(pk=task.pk).status for task in claimed} == {Status.RUNNING}


def test_settle_and_claim_is_one_statement_on_postgresql(noop_type, daemon):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from atp.engine.engines import engine as chosen

    if chosen().name != "postgresql":
        pytest.skip("the PostgreSQL engine's")
    done = atp.enqueue("tests.noop")
    atp.enqueue("tests.noop")
    running(done, daemon)
    with CaptureQueriesContext(connection) as queries:
        settled, claimed = engine.settle_and_claim(
            daemon, [Outcome.finished(done.pk, 1, None)], 1, [noop_type.pk], start=1)
    assert settled == {done.pk} and len(claimed) == 1
    statements = [query["sql"] for query in queries
                  if "SAVEPOINT" not in (query["sql"] or "")]  # of the test's transaction
    # The planner settings of the claim's transaction, then the statement itself.
    assert len(statements) == 2, statements


def test_within_limits_settle_and_claim_is_two_statements_on_postgresql(db, daemon):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from atp.engine.engines import engine as chosen

    if chosen().name != "postgresql":
        pytest.skip("the PostgreSQL engine's")
    atp.register_task_type("tests.single", "tests.handlers.noop", max_concurrency=1)
    done, waiting = atp.enqueue("tests.single"), atp.enqueue("tests.single")
    running(done, daemon)
    with CaptureQueriesContext(connection) as queries:
        settled, claimed = engine.settle_and_claim(
            daemon, [Outcome.finished(done.pk, 1, None)], 2, [done.type_id], start=1,
            limited=True)
    assert settled == {done.pk} and [task.pk for task in claimed] == [waiting.pk]
    statements = [query["sql"] for query in queries
                  if "SAVEPOINT" not in (query["sql"] or "")]  # of the test's transaction
    # The planner settings with the locks of the daemon and its limited types, then the
    # statement (which must read the leases after those locks are held).
    assert len(statements) == 2, statements


def test_a_round_on_mariadb_sends_its_rows_in_a_few_statements_however_many(noop_type, daemon):
    """The history entries (and responses) of a round of the mysql engine go in one
    INSERT each, however many tasks it ends and claims: counted by the server
    (``Com_insert``), since the driver's ``executemany`` falls back to one INSERT per
    row for a statement it cannot batch."""
    from django.db import connection

    from atp.engine.engines import engine as chosen

    if chosen().name != "mysql":
        pytest.skip("the mysql engine's")

    def inserts():
        with connection.cursor() as cursor:
            cursor.execute("SHOW SESSION STATUS LIKE 'Com_insert'")
            return int(cursor.fetchone()[1])

    tasks = atp.enqueue_many("tests.noop", [{}] * 30)
    engine.claim_for_daemon(daemon, 10, [noop_type.pk], start=10)
    before = inserts()
    settled, claimed = engine.settle_and_claim(
        daemon, [Outcome.finished(task.pk, 1, "done") for task in tasks[:10]], 20,
        [noop_type.pk], start=20)
    assert len(settled) == 10 and len(claimed) == 20
    # The ends' entries, their responses, the claim's entries.
    assert inserts() - before == 3


def test_settle_and_claim_for_a_stopped_daemon_claims_nothing(noop_type, daemon):
    from atp.exceptions import DaemonStopped

    done = atp.enqueue("tests.noop")
    atp.enqueue("tests.noop")
    running(done, daemon)
    engine.reap_daemon(daemon, "declared dead")
    with pytest.raises(DaemonStopped):
        engine.settle_and_claim(daemon, [Outcome.finished(done.pk, 1, None)], 1, [noop_type.pk], start=1)
    assert not Task.objects.filter(daemon__isnull=False).exists()


@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "not-prepared"])
def test_the_daemons_statements_run_prepared_or_not(noop_type, daemon, settings, prepared):
    """ATP_PREPARED_STATEMENTS off (behind a pooler that cannot keep them): the same
    verbs, each planned at every run; on PostgreSQL the server then holds none of them."""
    from django.db import connection

    from atp.engine.engines import engine as chosen

    def held():
        if chosen().name != "postgresql":
            return 0
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE "
                           "'%%unnest%%'")
            return cursor.fetchone()[0]

    settings.ATP_PREPARED_STATEMENTS = prepared
    done = atp.enqueue("tests.noop")
    atp.enqueue("tests.noop")
    running(done, daemon)
    before = held()
    settled, claimed = engine.settle_and_claim(
        daemon, [Outcome.finished(done.pk, 1, None)], 1, [noop_type.pk], start=1)
    assert settled == {done.pk} and len(claimed) == 1
    if chosen().name == "postgresql":
        assert held() > 0 if prepared else held() == before


@pytest.mark.django_db(transaction=True)
def test_a_round_the_database_refuses_writes_nothing_and_leaves_the_connection_usable(
        noop_type, daemon):
    """In autocommit mode (the daemon's) the round is its own transaction, sent in one
    round trip on PostgreSQL: refused, it is rolled back as a whole."""
    from django.db import DatabaseError, connection

    from atp.engine.engines import engine as chosen

    if chosen().name in ("sqlite", "mysql"):
        pytest.skip("SQLite and MariaDB/MySQL store a NUL in text: nothing to refuse")
    done = atp.enqueue("tests.noop")
    waiting = atp.enqueue("tests.noop")
    running(done, daemon)
    before = [snapshot(done), snapshot(waiting)]
    # PostgreSQL stores no NUL in text; the ORM engine refuses it before writing.
    with pytest.raises((DatabaseError, ValueError)):
        engine.settle_and_claim(daemon, [Outcome.failed(done.pk, 1, "a\x00b")], 1,
                                [noop_type.pk], start=1)
    assert not connection.in_atomic_block
    assert [snapshot(done), snapshot(waiting)] == before
    settled, claimed = engine.settle_and_claim(
        daemon, [Outcome.failed(done.pk, 1, "a-b")], 1, [noop_type.pk], start=1)
    assert settled == {done.pk} and [task.pk for task in claimed] == [waiting.pk]


def test_settle_writes_nothing_for_a_task_that_lost_its_lease_on_the_same_attempt(
        noop_type, daemon):
    """A PAUSED task whose attempt was lost is held: same attempt, a state an end may
    come from, but no lease. Its old worker's end must not write."""
    held = atp.enqueue("tests.noop")
    running(held, daemon)
    atp.pause(held)
    engine.hand_back(held, "daemon stopping", attempt=1, daemon=daemon)
    stored = Instance.objects.get(pk=held.pk)
    assert (stored.status, stored.attempt, Task.objects.get(pk=held.pk).daemon) == (
        Status.PAUSED, 1, None)
    before = snapshot(held)
    assert settle(daemon, [Outcome.finished(held.pk, 1, "late")]) == set()
    assert settle(daemon, [Outcome.failed(held.pk, 1, "late")]) == set()
    assert snapshot(held) == before


@pytest.mark.parametrize("statement", ["settle_and_claim", "settle_and_claim_within_limits"])
def test_a_round_on_postgresql_sends_the_keys_it_settled_once_not_with_each_task(
        postgres_only, noop_type, daemon, statement):
    """The keys settled (and the strays) come on one row of the result: repeated on each
    task claimed, a round's result grew with the square of its tasks."""
    from atp.engine import postgresql

    ended = [running(atp.enqueue("tests.noop"), daemon) for _ in range(3)]
    waiting = [atp.enqueue("tests.noop") for _ in range(4)]
    params = {**postgresql.settle_parameters(daemon, [Outcome.finished(task.pk, 1, None)
                                                      for task in ended]),
              **postgresql.claim_parameters(daemon, 10, [noop_type.pk], 0, inputs=True)}
    rows = postgresql._locked_round(postgresql.SQL[statement], params,
                                    within_limits=statement.endswith("limits"))
    assert sorted(row[4] for row in rows) == [task.pk for task in waiting]
    carried = [row[3] for row in rows if row[3] is not None]
    assert len(carried) == 1 and sorted(carried[0]) == [task.pk for task in ended]
    settled, (claimed, strays) = postgresql._claim(
        postgresql.SQL["settle_and_claim"], params, daemon, True)
    assert (settled, claimed, strays) == (set(), [], [])  # the same round again: nothing left
