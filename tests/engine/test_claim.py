import datetime
import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import atp
from atp import engine
from atp.exceptions import InvalidParameter, TaskTypeNotFound
from atp.models import Instance, LogRecord, Task, Type
from atp.states import Status
from tests.processes import start_module, wait_for_files

pytestmark = pytest.mark.django_db


def test_a_claim_schedules_the_task_for_the_daemon(noop_type, daemon):
    queued = atp.enqueue("tests.noop", {"n": 1})
    [claimed] = atp.dequeue(daemon)

    assert claimed.pk == queued.pk
    assert (claimed.status, claimed.attempt, claimed.daemon_id) == (Status.SCHEDULED, 1, daemon.pk)
    assert claimed.type == noop_type
    lease = Task.objects.get(pk=queued.pk)
    assert lease.daemon == daemon and lease.claimed is not None
    record = LogRecord.objects.filter(instance=queued).last()
    assert (record.status, record.attempt, record.daemon) == (Status.SCHEDULED, 1, str(daemon))
    assert atp.dequeue(daemon) == []


def test_tasks_are_claimed_by_priority_then_by_how_long_they_waited(noop_type, daemon):
    low = atp.enqueue("tests.noop")
    high = atp.enqueue("tests.noop", priority=10)
    later_low = atp.enqueue("tests.noop")
    lowest = atp.enqueue("tests.noop", priority=-5)
    old_eta = atp.enqueue("tests.noop", eta=timezone.now() - datetime.timedelta(hours=1))
    order = [task.pk for task in atp.dequeue(daemon, limit=10)]
    assert order == [high.pk, old_eta.pk, low.pk, later_low.pk, lowest.pk]


def test_each_task_claimed_comes_with_its_own_type_and_inputs(noop_type, daemon):
    other = atp.register_task_type("tests.claimed_beside", "tests.handlers.noop", timeout=7)
    queued = [atp.enqueue("tests.noop" if n % 3 else "tests.claimed_beside", {"n": n},
                          priority=n % 2) for n in range(9)]
    claimed = engine.claim_for_daemon(daemon, 9, [noop_type.pk, other.pk])
    assert sorted(task.pk for task in claimed) == sorted(task.pk for task in queued)
    by_pk = {task.pk: task for task in queued}
    for task in claimed:
        assert task.type_id == by_pk[task.pk].type_id == task.type.pk
        assert task.type.timeout == Type.objects.get(pk=task.type_id).timeout
        assert task.inputs.load() == by_pk[task.pk].inputs.load()
    # Its times as the ORM reads them: the same instants, in the same time zone.
    for task in claimed:
        stored = Instance.objects.select_related("type").get(pk=task.pk)
        for obj, read in ((task, stored), (task.type, stored.type)):
            for field in type(obj)._meta.concrete_fields:
                value = getattr(obj, field.attname)
                assert value == getattr(read, field.attname), field
                if isinstance(value, datetime.datetime):
                    assert value.tzinfo == getattr(read, field.attname).tzinfo, field


def test_a_task_is_not_claimed_before_its_eta(noop_type, daemon):
    atp.enqueue("tests.noop", eta=timezone.now() + datetime.timedelta(minutes=5))
    atp.enqueue("tests.noop", countdown=300)
    assert atp.dequeue(daemon, limit=5) == []
    assert Task.objects.filter(daemon__isnull=True).count() == 2


def test_paused_types_keep_their_queue_but_are_not_claimed(noop_type, daemon):
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    waiting = atp.enqueue("tests.noop")
    other = atp.enqueue("tests.echo")
    atp.pause_type("tests.noop")
    assert [task.pk for task in atp.dequeue(daemon, limit=5)] == [other.pk]
    atp.resume_type("tests.noop")
    assert [task.pk for task in atp.dequeue(daemon, limit=5)] == [waiting.pk]


def test_a_daemon_may_serve_only_some_types(noop_type, daemon):
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    atp.enqueue("tests.noop")
    echo = atp.enqueue("tests.echo")
    assert [task.pk for task in atp.dequeue(daemon, limit=5, types=["tests.echo"])] == [echo.pk]
    with pytest.raises(TaskTypeNotFound, match="'tests.nope'"):
        atp.dequeue(daemon, types=["tests.nope", "tests.echo"])


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "3"])
def test_a_bad_limit_is_refused(daemon, limit):
    with pytest.raises(InvalidParameter, match="limit must be a positive integer"):
        atp.dequeue(daemon, limit=limit)


def test_an_unknown_daemon_is_refused(noop_type):
    atp.enqueue("tests.noop")
    with pytest.raises(InvalidParameter, match="no such daemon"):
        atp.dequeue(987654)
    assert Instance.objects.get().status == Status.ACCEPTED


def test_a_claim_costs_the_same_statements_for_one_task_as_for_fifty(noop_type, daemon):
    atp.enqueue_many("tests.noop", [{}] * 51)
    with CaptureQueriesContext(connection) as one:
        assert len(atp.dequeue(daemon, limit=1)) == 1
    with CaptureQueriesContext(connection) as fifty:
        assert len(atp.dequeue(daemon, limit=50)) == 50
    assert len(one) == len(fifty)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_four_processes_claim_2000_tasks_and_each_task_exactly_once(noop_type, tmp_path):
    pks = {task.pk for task in atp.enqueue_many("tests.noop", [{}] * 2000)}
    go = tmp_path / "go"
    consumers = []
    for number, limit in enumerate((1, 5, 10, 25)):
        ready = tmp_path / f"ready-{number}"
        consumers.append((ready, start_module("tests.claim_worker", ready, go, limit)))
    wait_for_files([ready for ready, _ in consumers], timeout=60)
    go.touch()

    results = []
    for _, process in consumers:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        results.append(json.loads(out))

    claimed = [pk for result in results for pk in result["claimed"]]
    assert len(claimed) == len(set(claimed)), "a task was claimed twice"
    assert set(claimed) == pks, "a task was lost"
    takers = sum(1 for result in results if result["claimed"])
    # PostgreSQL consumers claim side by side. SQLite serves one writer at a time and
    # not fairly (a waiting writer sleeps while the holder takes the lock again), so
    # there it is enough that the claims interleaved between consumers.
    assert takers == 4 if connection.vendor == "postgresql" else takers >= 2
    assert set(Instance.objects.values_list("status", "attempt")) == {(Status.SCHEDULED, 1)}
    assert LogRecord.objects.filter(status=Status.SCHEDULED).count() == 2000
    for result in results:
        leased = set(Task.objects.filter(daemon_id=result["daemon"]).values_list("pk", flat=True))
        assert leased == set(result["claimed"])


def test_a_type_never_has_more_than_max_concurrency_tasks_in_flight(db, daemon):
    atp.register_task_type("tests.limited", "tests.handlers.noop", max_concurrency=2)
    atp.enqueue_many("tests.limited", [{}] * 5)
    first = atp.dequeue(daemon, limit=5)
    assert len(first) == 2
    assert atp.dequeue(daemon, limit=5) == []
    engine.start(first[0], attempt=1)
    engine.finish(first[0], attempt=1)
    assert len(atp.dequeue(daemon, limit=5)) == 1


def test_a_limited_type_keeps_its_place_in_the_priority_order(db, daemon):
    atp.register_task_type("tests.limited", "tests.handlers.noop", max_concurrency=1)
    atp.register_task_type("tests.free", "tests.handlers.noop")
    urgent = atp.enqueue_many("tests.limited", [{}] * 3, priority=10)
    ordinary = atp.enqueue_many("tests.free", [{}] * 3)
    claimed = [task.pk for task in atp.dequeue(daemon, limit=3)]
    assert claimed == [urgent[0].pk, ordinary[0].pk, ordinary[1].pk]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_concurrent_daemons_respect_a_concurrency_limit_together(db, tmp_path):
    atp.register_task_type("tests.limited", "tests.handlers.noop", max_concurrency=3)
    atp.enqueue_many("tests.limited", [{}] * 200)
    go = tmp_path / "go"
    consumers = []
    for number in range(4):
        ready = tmp_path / f"ready-{number}"
        consumers.append((ready, start_module("tests.claim_worker", ready, go, 2)))
    wait_for_files([ready for ready, _ in consumers], timeout=60)
    go.touch()
    claimed = []
    for _, process in consumers:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        claimed += json.loads(out)["claimed"]
    assert len(claimed) == 3
    assert Instance.objects.filter(status=Status.SCHEDULED).count() == 3


def test_the_time_out_clock_starts_at_the_claim(db, daemon):
    atp.register_task_type("tests.timed", "tests.handlers.noop", timeout=90)
    atp.enqueue("tests.timed")
    [claimed] = atp.dequeue(daemon)
    lease = Task.objects.get(pk=claimed.pk)
    assert lease.deadline - lease.claimed == datetime.timedelta(seconds=90)
    engine.start(claimed, attempt=1)
    assert Task.objects.get(pk=claimed.pk).deadline == lease.deadline


@pytest.mark.django_db(transaction=True)
def test_times_are_read_in_c_only_where_they_come_out_as_djangos(postgres_only, noop_type, daemon):
    """psycopg's loader gives ``datetime.timezone.utc``: where Django reads times in
    another tzinfo (a database ``TIME_ZONE`` of "UTC" is ``ZoneInfo("UTC")``), it keeps
    Django's loader, and a claimed task's times carry Django's tzinfo."""
    from django.db import connections
    from django.utils.functional import cached_property

    wrapper = connections["default"]
    cached = [name for kind in type(wrapper).__mro__ for name, value in vars(kind).items()
              if isinstance(value, cached_property)]

    def forget():  # what the connection derived from its settings, and the connection
        for name in cached:
            wrapper.__dict__.pop(name, None)
        wrapper.close()

    atp.enqueue("tests.noop")
    saved = wrapper.settings_dict.get("TIME_ZONE")
    wrapper.settings_dict["TIME_ZONE"] = "UTC"
    forget()
    try:
        [claimed] = engine.claim_for_daemon(daemon, 1, [noop_type.pk])
        assert claimed.updated.tzinfo == wrapper.timezone != datetime.UTC
    finally:
        wrapper.settings_dict["TIME_ZONE"] = saved
        forget()
