import datetime

import pytest
from django.db.models import F

import atp
from atp import stats
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
    ended = stats.ended_spans(datetime.timedelta(minutes=5))[noop_type.pk]
    assert ended.counts == {Status.FINISHED: 1}
    assert ended.run.count == 1 and ended.run.sum_seconds == pytest.approx(7)
    five, ten = (stats.BUCKET_BOUNDS_SECONDS.index(bound) for bound in (5, 10))
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
