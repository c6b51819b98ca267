import datetime

import pytest
from django.db.models import F

import atp
from atp import histograms, stats, trends
from atp.models import Instance
from atp.states import Status
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


def test_live_counts_come_from_the_queue_and_ended_counts_from_the_last_hour(noop_type, daemon):
    old = TaskFactory(type=noop_type, status=Status.FAILED, daemon=daemon)
    for status in (Status.RUNNING, Status.FINISHED, Status.FINISHED, Status.ACCEPTED):
        TaskFactory(type=noop_type, status=status, daemon=daemon)
    Instance.objects.filter(pk=old.pk).update(finished=F("finished") - datetime.timedelta(hours=2))
    key = noop_type.pk
    assert stats.live_counts() == {(key, Status.RUNNING): 1, (key, Status.ACCEPTED): 1}
    assert stats.ended_counts() == {(key, Status.FINISHED): 2}
    [typed] = [t for t in stats.types_with_counts() if t.pk == key]
    assert typed.live[Status.ACCEPTED] == 1 and typed.ended[Status.FAILED] == 0


def test_waiting_tells_runnable_from_delayed_and_the_oldest(noop_type):
    first = atp.enqueue("tests.noop")
    atp.enqueue("tests.noop")
    atp.enqueue("tests.noop", countdown=300)
    waiting = stats.waiting()
    assert (waiting.runnable, waiting.delayed) == (2, 1)
    assert waiting.oldest_since == first.task.not_before


def test_a_cancelled_task_whose_worker_is_still_stopping_is_not_counted_live(noop_type, daemon):
    running = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)
    atp.cancel(running)
    assert stats.live_counts() == {}


@pytest.mark.django_db(transaction=True)
def test_a_pull_consumer_is_not_a_live_daemon(noop_type):
    from atp import engine

    atp.register_pull_type("tests.pull")
    atp.enqueue("tests.pull")
    atp.lease_tasks("tests.pull", 1, 60, consumer="gpu-7")
    daemon = engine.register_daemon()
    assert [d.pk for d in stats.live_daemons()] == [daemon.pk]


def test_waiting_by_type_splits_the_queue_by_type(noop_type, daemon):
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    atp.enqueue_many("tests.noop", [{}] * 2)
    atp.enqueue("tests.echo", countdown=300)
    TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)  # claimed: not waiting
    by_type = stats.waiting_by_type()
    echo = atp.get_type("tests.echo")
    assert (by_type[noop_type.pk].runnable, by_type[noop_type.pk].delayed) == (2, 0)
    assert (by_type[echo.pk].runnable, by_type[echo.pk].delayed, by_type[echo.pk].oldest_since) == (0, 1, None)
    total = stats.waiting()
    assert (total.runnable, total.delayed) == (2, 1)


def test_ended_spans_read_only_the_window(noop_type, daemon):
    recent = TaskFactory(type=noop_type, status=Status.FINISHED, daemon=daemon)
    old = TaskFactory(type=noop_type, status=Status.FINISHED, daemon=daemon)
    Instance.objects.filter(pk=old.pk).update(finished=F("finished") - datetime.timedelta(minutes=10))
    Instance.objects.filter(pk=recent.pk).update(started=F("finished") - datetime.timedelta(seconds=7))
    ended = histograms.ended_spans(datetime.timedelta(minutes=5))[noop_type.pk]
    assert ended.counts == {Status.FINISHED: 1}
    assert ended.run.count == 1 and ended.run.sum_seconds == pytest.approx(7)
    five, ten = (histograms.BUCKET_BOUNDS_SECONDS.index(bound) for bound in (5, 10))
    assert (ended.run.buckets[five], ended.run.buckets[ten]) == (0, 1)


def test_live_daemon_totals_count_daemons_and_their_workers(db):
    from atp import engine

    engine.register_daemon(workers=3)
    engine.register_daemon(workers=2)
    assert stats.live_daemon_totals() == stats.DaemonTotals(daemons=2, workers=5)


def test_daemons_gone_with_leases_are_the_silent_or_stopped_ones_that_hold_tasks(noop_type, settings):
    from django.db.models.functions import Now

    from atp import engine
    from atp.models import Daemon

    settings.ATP_DAEMON_TIMEOUT_SECONDS = 60
    holding, idle, stopped = (engine.register_daemon() for _ in range(3))
    TaskFactory(type=noop_type, status=Status.RUNNING, daemon=holding)
    TaskFactory(type=noop_type, status=Status.RUNNING, daemon=stopped)
    assert stats.daemons_gone_with_leases() == []
    an_hour_ago = Now() - datetime.timedelta(hours=1)
    Daemon.objects.filter(pk__in=[holding.pk, idle.pk]).update(heartbeat=an_hour_ago)
    Daemon.objects.filter(pk=stopped.pk).update(stopped=Now())  # as a bug would leave it
    assert [(d.pk, d.held) for d in stats.daemons_gone_with_leases()] == [
        (holding.pk, 1), (stopped.pk, 1)]


def test_a_histogram_estimates_its_quantiles_within_its_buckets():
    one_second = histograms.BUCKET_BOUNDS_SECONDS.index(1)
    histogram = histograms.Histogram(tuple(0 if index < one_second else 4
                                      for index in range(len(histograms.BUCKET_BOUNDS_SECONDS))), 4, 3.0)
    assert histogram.quantile(0.5) == pytest.approx(0.75)  # all in (0.5, 1]: halfway through
    assert histograms.Histogram((0,) * len(histograms.BUCKET_BOUNDS_SECONDS), 0, 0.0).quantile(0.5) is None
    beyond = histograms.Histogram((0,) * len(histograms.BUCKET_BOUNDS_SECONDS), 2, 99999.0)
    assert beyond.quantile(0.95) == histograms.BUCKET_BOUNDS_SECONDS[-1]


MINUTE = datetime.timedelta(minutes=1)


def place(task, **times):
    """Date ``task``'s history entries, by state (``ACCEPTED=...``), and its own times."""
    from atp.models import LogRecord

    for status, when in times.items():
        if status.isupper():
            LogRecord.objects.filter(instance=task, status=status).update(time=when)
    Instance.objects.filter(pk=task.pk).update(**{name: when for name, when in times.items() if name.islower()})


@pytest.fixture
def history(noop_type, daemon):
    """Tasks whose history lies at known minutes before ``now``: returns ``(now, m0)``,
    ``m0`` the start of the current minute."""
    from atp.db import database_now

    now = database_now("default")
    m0 = now.replace(second=0, microsecond=0)
    second = datetime.timedelta(seconds=1)
    # A: waited from m0-20 to m0-10, then ran and finished there.
    ran = TaskFactory(type=noop_type, status=Status.FINISHED, daemon=daemon)
    place(ran, ACCEPTED=m0 - 20 * MINUTE + second, created=m0 - 20 * MINUTE + second,
          SCHEDULED=m0 - 10 * MINUTE + second, RUNNING=m0 - 10 * MINUTE + second,
          started=m0 - 10 * MINUTE + second, FINISHED=m0 - 10 * MINUTE + 2 * second,
          finished=m0 - 10 * MINUTE + 2 * second)
    # B: waits since m0-20.
    place(atp.enqueue("tests.noop"), ACCEPTED=m0 - 20 * MINUTE + 2 * second)
    # C: waited from m0-5, cancelled at m0-3: it left the queue then.
    cancelled = atp.enqueue("tests.noop")
    atp.cancel(cancelled)
    place(cancelled, ACCEPTED=m0 - 5 * MINUTE, CANCELLED=m0 - 3 * MINUTE, finished=m0 - 3 * MINUTE)
    # D: ran and was cancelled while running (not a move out of the queue), all in m0.
    running = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)
    atp.cancel(running)
    place(running, ACCEPTED=m0, SCHEDULED=m0, RUNNING=m0, CANCELLED=m0, started=m0, finished=m0)
    # E: failed, then an operator retried it: it waits again, since m0.
    retried = TaskFactory(type=noop_type, status=Status.FAILED, daemon=daemon)
    atp.reenqueue(retried)
    place(retried, ACCEPTED=m0, SCHEDULED=m0, RUNNING=m0, FAILED=m0)
    # An old entry, out of every window; and another type's task, waiting since m0-30.
    place(atp.enqueue("tests.noop"), ACCEPTED=m0 - datetime.timedelta(days=3))
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    place(atp.enqueue("tests.echo"), ACCEPTED=m0 - 30 * MINUTE)
    return now, m0


def waiting(minutes):
    """How many tasks of ``history``'s type wait at the end of the minute m0 - ``minutes``:
    the old task throughout, B from m0-20 on, A from m0-20 to m0-11, C from m0-5 to
    m0-4, E in the current minute."""
    return 1 + (minutes <= 20) + (11 <= minutes <= 20) + (4 <= minutes <= 5) + (minutes == 0)


def test_activity_counts_the_windows_ends_retries_waits_and_queue_by_minute(history, noop_type):
    now, m0 = history
    hour = trends.activity(now, datetime.timedelta(hours=1), MINUTE, [noop_type.pk], waiting_now=3)
    assert len(hour.starts) == 60 and hour.starts[-1] == m0 and hour.step == MINUTE
    ago = {minutes: 59 - minutes for minutes in range(60)}  # the point of m0 - minutes
    assert hour.finished[ago[10]] == 1 and sum(hour.finished) == 1
    assert sum(hour.failed) == 0  # E failed, but was retried: it is no longer failed
    assert hour.retried[ago[0]] == 1 and sum(hour.retried) == 1
    assert list(hour.depth) == [waiting(minutes) for minutes in range(59, -1, -1)]
    wait = hour.wait[ago[10]]
    assert wait.count == 1 and wait.quantile(0.5) == pytest.approx(600, rel=0.01)
    assert hour.wait[ago[0]].count == 1  # D, which started


def test_activity_of_every_type_and_over_a_day(history, noop_type):
    now, m0 = history
    everything = trends.activity(now, datetime.timedelta(hours=1), MINUTE, None, waiting_now=4)
    assert everything.depth[-31] == 2 and everything.depth[-32] == 1  # echo's task came at m0-30
    quarter = 15 * MINUTE
    day = trends.activity(now, datetime.timedelta(days=1), quarter, [noop_type.pk], waiting_now=3)
    assert len(day.starts) == 96 and day.starts[-1] <= m0 < day.starts[-1] + quarter
    [point] = [index for index, start in enumerate(day.starts)
               if start <= m0 - 10 * MINUTE < start + quarter]
    assert day.finished[point] == 1 and sum(day.finished) == 1 and sum(day.retried) == 1
    for start, depth in zip(day.starts, day.depth, strict=True):  # at the end of each point
        minutes = max(0, (m0 - (start + quarter - MINUTE)) // MINUTE)
        assert depth == (waiting(minutes) if minutes < 60 else 1), start
    assert day.wait[point].count == 1 + (point == len(day.starts) - 1)  # D ended in the last


@pytest.mark.slow
def test_the_charts_queries_read_the_window_through_indexes_with_a_million_history_rows(
        postgres_only, noop_type, daemon):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from atp.db import database_now
    from tests.bulk import unchecked_references

    TaskFactory(type=noop_type, status=Status.FINISHED, daemon=daemon)
    with connection.cursor() as cursor, unchecked_references(cursor):
        # 200,000 tasks that ended days ago, with 5 history entries each.
        cursor.execute(
            """
            INSERT INTO atp_instance (type_id, identifier, named, status, priority, attempt,
                restarts, retries, snoozes, progress_message, created, updated, started, finished)
            SELECT %s, 'old-' || n, false, 'FINISHED', 0, 1, 0, 0, 0, '', ts, ts, ts, ts
            FROM (SELECT n, now() - interval '3 days' - n * interval '1 s' AS ts
                  FROM generate_series(1, 200000) AS n) AS s
            """, [noop_type.pk])
        cursor.execute(
            """
            INSERT INTO atp_logrecord (instance_id, time, status, attempt, message, daemon, actor)
            SELECT i.id, i.created, (ARRAY['ACCEPTED', 'SCHEDULED', 'RUNNING', NULL, 'FINISHED'])[k],
                   1, '', '', ''
            FROM atp_instance AS i, generate_series(1, 5) AS k WHERE i.identifier LIKE 'old-%%'
            """)
        cursor.execute("ANALYZE atp_instance")
        cursor.execute("ANALYZE atp_logrecord")
        cursor.execute("RESET ALL")  # the planner as it chooses: not the claim's settings
    for type_ids in (None, [noop_type.pk]):
        for span, step in ((datetime.timedelta(hours=1), MINUTE), (datetime.timedelta(days=1), 15 * MINUTE)):
            with CaptureQueriesContext(connection) as queries:
                shown = trends.activity(database_now("default"), span, step, type_ids, waiting_now=0)
            assert sum(shown.finished) == 1
            for query in queries.captured_queries:
                if "atp_logrecord" in query["sql"] or "atp_instance" in query["sql"]:
                    with connection.cursor() as cursor:
                        cursor.execute(f"EXPLAIN {query['sql']}")
                        plan = "\n".join(row[0] for row in cursor.fetchall())
                    assert "Seq Scan" not in plan, plan


def test_the_charts_queries_search_indexes_on_sqlite(noop_type):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from atp.db import database_now

    if connection.vendor != "sqlite":
        pytest.skip("SQLite's plans (PostgreSQL's: the test above)")
    for type_ids in (None, [noop_type.pk]):
        with CaptureQueriesContext(connection) as queries:
            trends.activity(database_now("default"), datetime.timedelta(days=1), 15 * MINUTE, type_ids, 0)
        for query in queries.captured_queries:
            with connection.cursor() as cursor:
                cursor.execute(f"EXPLAIN QUERY PLAN {query['sql']}")
                steps = [row[-1] for row in cursor.fetchall()]
            assert not [step for step in steps if step.startswith("SCAN atp_logrecord")
                        or step.startswith("SCAN atp_instance")], steps


def test_watched_daemons_tell_live_silent_and_dead_ones_holding_tasks(noop_type, settings):
    from django.db.models.functions import Now

    from atp import engine
    from atp.models import Daemon

    settings.ATP_DAEMON_TIMEOUT_SECONDS = 60
    live, silent, dead, gone_idle, stopped = (engine.register_daemon() for _ in range(5))
    for holder in (silent, dead, stopped):
        TaskFactory(type=noop_type, status=Status.RUNNING, daemon=holder)
    Daemon.objects.filter(pk=silent.pk).update(heartbeat=Now() - datetime.timedelta(seconds=40))
    Daemon.objects.filter(pk__in=[dead.pk, gone_idle.pk]).update(heartbeat=Now() - datetime.timedelta(seconds=90))
    Daemon.objects.filter(pk=stopped.pk).update(stopped=Now())
    watched = {d.pk: (d.is_live, d.is_heard, d.running) for d in stats.watched_daemons()}
    # A dead daemon holding nothing has nothing to show; a stopped one is not watched.
    assert watched == {live.pk: (True, True, 0), silent.pk: (True, False, 1), dead.pk: (False, False, 1)}
    assert [d.pk for d in stats.live_daemons()] == sorted([live.pk, silent.pk])  # one rule


@pytest.mark.django_db(transaction=True)
def test_the_queue_counts_pull_and_paused_types_tasks_apart(noop_type):
    from atp import engine

    atp.register_task_type("tests.held", "tests.handlers.noop")
    atp.register_pull_type("tests.pull")
    first = atp.enqueue("tests.noop")
    atp.enqueue("tests.noop", countdown=300)
    atp.enqueue_many("tests.pull", [{}] * 2)
    atp.enqueue_many("tests.held", [{}] * 3)
    engine.pause_type("tests.held")
    queue = stats.queue(stats.waiting_by_type())
    assert queue == stats.Queue(runnable=1, delayed=1, oldest_since=first.task.not_before, pull=2, held=3)
    [held] = [t for t in stats.types_with_counts() if t.identifier == "tests.held"]
    assert (held.waiting, held.held) == (3, 3)
    assert stats.claimable(stats.waiting_by_type()).keys() == {noop_type.pk}


def test_an_empty_queue(db):
    assert stats.queue(stats.waiting_by_type()) == stats.Queue(0, 0, None, 0, 0)


def test_schedules_come_soonest_first_with_their_time_zone(noop_type):
    atp.schedule("later", "tests.noop", every=3600)
    atp.schedule("paris", "tests.noop", cron="* * * * *", timezone="Europe/Paris")
    atp.schedule("off", "tests.noop", every=60, enabled=False)
    assert [s.name for s in stats.schedules()] == ["paris", "later"]


def test_open_batches_count_their_members_done_of_all(noop_type):
    from tests.factories import drive

    with atp.batch("tests.noop", name="open") as made:
        tasks = atp.enqueue_many("tests.noop", [{}] * 3)
    drive(tasks[0], Status.FINISHED)
    [batch] = stats.open_batches()
    assert (batch.pk, batch.members_ended, batch.members_total) == (made.pk, 1, 3)


def test_the_dashboards_new_queries_search_indexes_on_sqlite(noop_type):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    if connection.vendor != "sqlite":
        pytest.skip("SQLite's plans")
    with atp.batch("tests.noop"):
        atp.enqueue("tests.noop")
    with CaptureQueriesContext(connection) as queries:
        stats.queue(stats.waiting_by_type()), stats.schedules(), stats.open_batches()
        stats.watched_daemons()
    for query in queries.captured_queries:
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN QUERY PLAN {query['sql']}")
            steps = [row[-1] for row in cursor.fetchall()]
        # The queue table holds live tasks only; an index walked in order stops at the limit.
        assert not [step for step in steps if step.split(" ")[:2] in (
            ["SCAN", "atp_instance"], ["SCAN", "atp_logrecord"], ["SCAN", "atp_batch"],
            ["SCAN", "atp_schedule"]) and "USING" not in step], (query["sql"], steps)
