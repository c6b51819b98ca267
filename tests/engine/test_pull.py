"""Pull-style leasing (``atp.engine.pull``): consumers outside atpd lease the tasks of pull
types, extend, complete and fail them; an expired lease makes its task leasable again.

No test waits for a lease to run out: a lease is made to expire by moving its deadline
into the past in the database.
"""

import datetime

import pytest
from django.db import connection
from django.db.models.functions import Now

import atp
from atp import engine
from atp.engine import pull
from atp.exceptions import (
    AttemptSuperseded,
    InvalidParameter,
    InvalidTransition,
    LeaseExpired,
    TaskTypeInUse,
)
from atp.invariants import check_queue
from atp.liveness import Watch
from atp.models import Daemon, Instance, LogRecord, Response, Task
from atp.states import Status
from tests.interleave import interleave

pytestmark = pytest.mark.django_db(transaction=True)

SECOND = datetime.timedelta(seconds=1)


def assert_invariants():
    assert [str(v) for v in check_queue()] == []


@pytest.fixture
def pull_type(db):
    return atp.register_pull_type("tests.pull", max_restarts=1)


def expire(*tasks):
    """Make the leases of ``tasks`` run out: their deadline a second ago, on the database clock."""
    Task.objects.filter(pk__in=[task.pk for task in tasks]).update(deadline=Now() - SECOND)


def state(task):
    return Instance.objects.values_list("status", "attempt", "restarts").get(pk=task.pk)


# -- leasing -------------------------------------------------------------------------


def test_lease_tasks_takes_the_limit_in_claim_order_running_with_inputs(pull_type):
    low = atp.enqueue("tests.pull", {"n": 1})
    high = atp.enqueue("tests.pull", {"n": 2}, priority=5)
    later = atp.enqueue("tests.pull", {"n": 3})
    atp.enqueue("tests.pull", {"n": 4}, countdown=3600)  # its eta has not come
    leased = atp.lease_tasks("tests.pull", 2, 60)
    assert [task.pk for task in leased] == [high.pk, low.pk]
    assert [task.load_inputs() for task in leased] == [{"n": 2}, {"n": 1}]
    assert all((t.status, t.attempt, str(t.daemon)) == (Status.RUNNING, 1, "consumer pull")
               for t in leased)
    deadline, claimed = Task.objects.values_list("deadline", "claimed").get(pk=high.pk)
    assert deadline - claimed == datetime.timedelta(seconds=60)
    assert [t.pk for t in atp.lease_tasks("tests.pull", 10, 60)] == [later.pk]
    assert atp.lease_tasks("tests.pull", 10, 60) == []
    history = list(LogRecord.objects.filter(instance=high).values_list("status", "daemon"))
    assert history[1:] == [(Status.SCHEDULED, "consumer pull"), (Status.RUNNING, "consumer pull")]
    assert_invariants()


def test_a_paused_pull_type_leases_nothing(pull_type):
    task = atp.enqueue("tests.pull")
    atp.pause_type("tests.pull")
    assert atp.lease_tasks("tests.pull", 5, 60) == []
    atp.resume_type("tests.pull")
    assert [t.pk for t in atp.lease_tasks("tests.pull", 5, 60)] == [task.pk]


def test_lease_tasks_by_tag_leases_only_that_tag(pull_type):
    red = atp.enqueue("tests.pull", tag="red")
    blue = atp.enqueue("tests.pull", tag="blue")
    atp.enqueue("tests.pull")
    red_too = atp.enqueue_many("tests.pull", [1, 2], tag="red")
    leased = atp.lease_tasks("tests.pull", 10, 60, tag="red")
    assert [t.pk for t in leased] == [red.pk, *(t.pk for t in red_too)]
    assert {t.tag for t in leased} == {"red"}
    assert atp.lease_tasks("tests.pull", 10, 60, tag="green") == []
    assert [t.pk for t in atp.lease_tasks("tests.pull", 10, 60, tag="blue")] == [blue.pk]


def test_group_by_tag_leases_the_tag_of_the_first_task_in_claim_order(pull_type):
    untagged = atp.enqueue("tests.pull")
    blue = atp.enqueue("tests.pull", tag="blue", priority=1)
    atp.enqueue("tests.pull", tag="red")
    blue_too = atp.enqueue("tests.pull", tag="blue")
    leased = atp.lease_tasks("tests.pull", 10, 60, group_by_tag=True)
    assert [t.pk for t in leased] == [blue.pk, blue_too.pk]
    # The first is untagged now: the untagged tasks go together.
    assert [t.pk for t in atp.lease_tasks("tests.pull", 10, 60, group_by_tag=True)] == [untagged.pk]
    assert [t.tag for t in atp.lease_tasks("tests.pull", 10, 60, group_by_tag=True)] == ["red"]


@pytest.mark.parametrize("engine_setting", ["auto", "orm"])
def test_atpd_never_claims_a_pull_type(settings, pull_type, noop_type, engine_setting):
    settings.ATP_ENGINE = engine_setting
    pulled = atp.enqueue("tests.pull", priority=9)
    pushed = atp.enqueue("tests.noop")
    daemon = engine.register_daemon()
    assert [t.pk for t in atp.dequeue(daemon, limit=5)] == [pushed.pk]
    # Even when asked by id, as the daemon asks for the types it loaded.
    types = [pull_type.pk, noop_type.pk]
    assert engine.claim_for_daemon(daemon, 5, types, start=1) == []
    assert engine.settle_and_claim(daemon, [], 5, types, start=1) == (set(), [])
    assert engine.claim_for_daemon(daemon, 5, types, limited=True) == []
    with pytest.raises(InvalidParameter, match="is a pull type: lease its tasks"):
        atp.dequeue(daemon, types=["tests.pull"])
    assert state(pulled) == (Status.ACCEPTED, 0, 0)


@pytest.mark.parametrize("call", [
    lambda: atp.lease_tasks("tests.noop", 1, 60),
    lambda: atp.lease_tasks("tests.pull", 0, 60),
    lambda: atp.lease_tasks("tests.pull", 1001, 60),
    lambda: atp.lease_tasks("tests.pull", 1, 0),
    lambda: atp.lease_tasks("tests.pull", 1, 8 * 24 * 3600),
    lambda: atp.lease_tasks("tests.pull", 1, "60"),
    lambda: atp.lease_tasks("tests.pull", 1, 60, tag=""),
    lambda: atp.lease_tasks("tests.pull", 1, 60, tag="x" * 501),
    lambda: atp.lease_tasks("tests.pull", 1, 60, group_by_tag="yes"),
    lambda: atp.lease_tasks("tests.pull", 1, 60, consumer=""),
    lambda: atp.enqueue("tests.pull", tag="a\x00b"),
    lambda: atp.enqueue_many("tests.pull", [1], tag=7),
    lambda: atp.register_pull_type("tests.pull", timeout=60),
    lambda: atp.register_pull_type("tests.pull", max_concurrency=2),
    lambda: engine.update_task_type("tests.pull", rate=5),
], ids=["push type", "limit 0", "limit too high", "no lease", "lease too long",
        "lease as text", "empty tag", "tag too long", "group_by_tag not a flag",
        "no consumer", "tag with NUL", "tag not text", "pull timeout",
        "pull max_concurrency", "pull rate"])
def test_bad_input_is_refused_and_changes_nothing(pull_type, noop_type, row_counts, call):
    atp.enqueue("tests.pull")
    before = row_counts()
    with pytest.raises(InvalidParameter):
        call()
    assert row_counts() == before
    assert Task.objects.filter(daemon__isnull=False).count() == 0


def test_a_type_with_queued_tasks_does_not_switch_between_pull_and_atpd(pull_type, noop_type):
    atp.enqueue("tests.pull")
    atp.enqueue("tests.noop")
    with pytest.raises(TaskTypeInUse, match="becomes a type atpd runs only once"):
        atp.register_task_type("tests.pull", "tests.handlers.noop")
    with pytest.raises(TaskTypeInUse, match="becomes a pull type only once"):
        atp.register_pull_type("tests.noop")
    assert atp.get_type("tests.pull").pull and not atp.get_type("tests.noop").pull


# -- ending a lease ------------------------------------------------------------------


def test_extend_lease_moves_the_deadline_from_now(pull_type):
    atp.enqueue("tests.pull")
    [task] = atp.lease_tasks("tests.pull", 1, 10)
    deadline = atp.extend_lease(task, 3600)
    claimed = Task.objects.values_list("claimed", flat=True).get(pk=task.pk)
    assert datetime.timedelta(seconds=3600) <= deadline - claimed < datetime.timedelta(seconds=3610)
    assert Task.objects.values_list("deadline", flat=True).get(pk=task.pk) == deadline
    assert engine.expire_leases() == 0


def test_complete_finishes_the_task_with_its_response(pull_type):
    atp.enqueue("tests.pull")
    [task] = atp.lease_tasks("tests.pull", 1, 60, consumer="worker-7")
    returned = atp.complete(task, "<done/>", content_type="application/xml")
    assert returned.status == Status.FINISHED and returned is task
    assert not Task.objects.filter(pk=task.pk).exists()
    response = Response.objects.get(instance=task)
    assert (response.text, response.content_type) == ("<done/>", "application/xml")
    last = LogRecord.objects.filter(instance=task).last()
    assert (last.status, last.daemon, last.attempt) == (Status.FINISHED, "consumer worker-7", 1)
    assert_invariants()


def test_fail_ends_the_task_failed_without_a_retry_policy(pull_type):
    atp.enqueue("tests.pull")
    [task] = atp.lease_tasks("tests.pull", 1, 60)
    assert atp.fail(task, "the printer is on fire").status == Status.FAILED
    assert LogRecord.objects.filter(instance=task).last().message == "the printer is on fire"
    assert_invariants()


def test_fail_is_retried_by_the_types_retry_policy(db):
    atp.register_pull_type("tests.pull", retry_limit=1, min_backoff=3600)
    atp.enqueue("tests.pull")
    [task] = atp.lease_tasks("tests.pull", 1, 60)
    atp.fail(task, "busy")
    assert state(task) == (Status.ACCEPTED, 1, 0)
    assert atp.lease_tasks("tests.pull", 1, 60) == [], "leased before its backoff"
    Task.objects.filter(pk=task.pk).update(not_before=Now())
    [again] = atp.lease_tasks("tests.pull", 1, 60)
    assert again.attempt == 2
    atp.fail(again, "still busy")
    assert state(task) == (Status.FAILED, 2, 0)
    assert "not retried: retry_limit 1 reached" in LogRecord.objects.filter(instance=task).last().message
    assert_invariants()


# -- expiry --------------------------------------------------------------------------


def test_an_expired_lease_is_leased_again_counted_as_a_restart_then_fails(pull_type):
    atp.enqueue("tests.pull")
    [task] = atp.lease_tasks("tests.pull", 1, 60, consumer="a")
    expire(task)
    [again] = atp.lease_tasks("tests.pull", 1, 60, consumer="b")
    assert (again.pk, again.attempt, again.restarts) == (task.pk, 2, 1)
    restarted = LogRecord.objects.get(instance=task, status=Status.ACCEPTED, attempt=1)
    assert "the lease of consumer a expired" in restarted.message
    assert "restart 1 of 1" in restarted.message
    expire(again)
    assert atp.lease_tasks("tests.pull", 1, 60) == []  # max_restarts=1 is spent
    assert state(task) == (Status.FAILED, 2, 1)
    assert "restart limit reached (1 restarts)" in LogRecord.objects.filter(
        instance=task).last().message
    assert_invariants()


def test_the_daemons_maintenance_ends_expired_leases_and_leaves_live_ones(pull_type):
    first, second = atp.enqueue("tests.pull"), atp.enqueue("tests.pull")
    leased = atp.lease_tasks("tests.pull", 2, 60)
    expire(leased[0])
    from atp.daemon import maintenance

    assert maintenance.reap_stale_daemons(engine.register_daemon(), Watch()) == 0
    assert maintenance.expire_pull_leases() == 1
    assert state(first) == (Status.ACCEPTED, 1, 1)
    assert state(second) == (Status.RUNNING, 1, 0)
    assert_invariants()


def test_a_pull_consumer_is_never_reaped_as_a_silent_daemon(pull_type):
    atp.enqueue("tests.pull")
    [task] = atp.lease_tasks("tests.pull", 1, 3600)
    Daemon.objects.filter(consumer="pull").update(heartbeat=Now() - datetime.timedelta(days=1))
    from atp.daemon import maintenance

    me = engine.register_daemon()
    moments = iter([0.0, 1e6])  # a whole day of silence on the reaper's clock
    watch = Watch(lambda: next(moments))
    assert maintenance.reap_stale_daemons(me, watch) == 0
    assert maintenance.reap_stale_daemons(me, watch) == 0
    assert maintenance.reap_gone_daemons_on_this_host(me) == 0
    assert state(task) == (Status.RUNNING, 1, 0)
    assert Daemon.objects.get(consumer="pull").stopped is None


def test_an_operator_cancel_keeps_the_lease_until_it_expires(pull_type):
    atp.enqueue("tests.pull")
    [task] = atp.lease_tasks("tests.pull", 1, 60)
    atp.cancel(task.pk)
    with pytest.raises(InvalidTransition, match="CANCELLED"):
        atp.complete(task)
    assert Task.objects.get(pk=task.pk).daemon.consumer == "pull"
    expire(task)
    assert engine.expire_leases() == 0  # nothing restarted, the lease let go of
    assert not Task.objects.filter(pk=task.pk).exists()
    assert state(task) == (Status.CANCELLED, 1, 0)
    assert_invariants()


def test_an_operator_reenqueue_keeps_the_lease_until_its_deadline(pull_type):
    """A review found the task leased again at once, while its first consumer, which
    nothing can stop, still worked on it: twice at once."""
    atp.enqueue("tests.pull")
    [task] = atp.lease_tasks("tests.pull", 1, 60)
    atp.reenqueue(task.pk)
    assert_invariants()
    assert [str(v) for v in check_queue(settled=True)] == []
    assert engine.expire_leases() == 0
    assert atp.lease_tasks("tests.pull", 1, 60, consumer="other") == []  # still the first's
    expire(task)
    [again] = atp.lease_tasks("tests.pull", 1, 60, consumer="other")
    assert (again.pk, again.attempt, again.restarts) == (task.pk, 2, 0)
    with pytest.raises(AttemptSuperseded):
        atp.complete(task)
    atp.complete(again)
    assert_invariants()


def test_an_operator_cannot_pause_a_pull_task(pull_type):
    atp.enqueue("tests.pull")
    [task] = atp.lease_tasks("tests.pull", 1, 60)
    with pytest.raises(InvalidTransition, match="pull type"):
        atp.pause(task.pk)
    assert state(task) == (Status.RUNNING, 1, 0)
    assert Task.objects.get(pk=task.pk).paused_since is None


@pytest.mark.django_db(transaction=True)
def test_a_type_becoming_an_atpd_type_is_not_leased_by_a_consumer_meanwhile(noop_type):
    """A review found a task enqueued while its type switched from pull to atpd leased by
    a consumer: the switch now locks the type's row against enqueues, and the lease
    reads the type after it locked its rows."""
    atp.register_pull_type("tests.pull")

    def enqueue_then_lease():
        atp.enqueue("tests.pull")
        return atp.lease_tasks("tests.pull", 1, 60)

    first, second = interleave(
        lambda: atp.register_task_type("tests.pull", "tests.handlers.noop"),
        enqueue_then_lease, pause_after=r'SELECT COUNT\(\*\).*"atp_task"')
    first.get()
    with pytest.raises(InvalidParameter, match="not a pull type"):
        second.get()  # it read the type after the switch: refused before any lease
    assert not Task.objects.filter(daemon__isnull=False).exists()


# -- fencing -------------------------------------------------------------------------

WRITES = {
    "complete": lambda task: atp.complete(task, "late"),
    "fail": lambda task: atp.fail(task, "late"),
    "extend": lambda task: atp.extend_lease(task, 60),
}


@pytest.mark.parametrize("write", WRITES)
def test_a_write_from_an_expired_lease_is_refused_and_changes_nothing(pull_type, row_counts, write):
    atp.enqueue("tests.pull")
    [task] = atp.lease_tasks("tests.pull", 1, 60)
    expire(task)
    before = row_counts(), state(task), Task.objects.values_list("deadline").get(pk=task.pk)
    with pytest.raises(LeaseExpired, match="the lease of attempt 1 expired at"):
        WRITES[write](task)
    assert (row_counts(), state(task), Task.objects.values_list("deadline").get(pk=task.pk)) == before
    # Once its task went back to the queue (restart counted), still refused.
    engine.expire_leases()
    with pytest.raises(LeaseExpired):
        WRITES[write](task)
    assert state(task) == (Status.ACCEPTED, 1, 1)


@pytest.mark.parametrize("write", WRITES)
@pytest.mark.parametrize("max_restarts, ended", [(1, Status.ACCEPTED), (0, Status.FAILED)],
                         ids=["restarted", "failed with its restarts spent"])
def test_a_write_after_maintenance_ended_the_expired_lease_says_the_lease_expired(
        row_counts, write, max_restarts, ended):
    """A race test found 200 of 384 refused completes raising ``InvalidTransition``
    ("task is ACCEPTED") where the docs promise ``LeaseExpired``: the daemons'
    maintenance had ended the expired lease before the consumer's write came."""
    from atp.daemon import maintenance

    atp.register_pull_type("tests.pull", max_restarts=max_restarts)
    atp.enqueue("tests.pull")
    [task] = atp.lease_tasks("tests.pull", 1, 60, consumer="gpu-7")
    expire(task)
    assert maintenance.expire_pull_leases() == 1
    before = row_counts(), state(task)
    assert before[1][0] == ended
    with pytest.raises(LeaseExpired, match="the lease of attempt 1 expired") as refused:
        WRITES[write](task)
    assert "consumer gpu-7" in str(refused.value) and refused.value.current == ended
    assert (row_counts(), state(task)) == before


@pytest.mark.parametrize("write", WRITES)
def test_a_write_from_a_superseded_lease_is_refused_and_changes_nothing(pull_type, row_counts, write):
    atp.enqueue("tests.pull")
    [task] = atp.lease_tasks("tests.pull", 1, 60, consumer="a")
    expire(task)
    [again] = atp.lease_tasks("tests.pull", 1, 60, consumer="b")
    before = row_counts(), state(task), Task.objects.values_list("deadline", "daemon").get(pk=task.pk)
    with pytest.raises(AttemptSuperseded, match="attempt 1 was superseded by attempt 2"):
        WRITES[write](task)
    assert (row_counts(), state(task),
            Task.objects.values_list("deadline", "daemon").get(pk=task.pk)) == before
    atp.complete(again)
    assert_invariants()


def test_a_task_atpd_runs_is_refused(noop_type, pull_type):
    atp.enqueue("tests.noop")
    [task] = atp.dequeue(engine.register_daemon())
    with pytest.raises(InvalidParameter, match="not of a pull type"):
        atp.complete(task)
    assert state(task) == (Status.SCHEDULED, 1, 0)


def test_an_expiry_of_a_lease_being_extended_reads_the_deadline_under_the_lock(pull_type):
    atp.enqueue("tests.pull")
    [task] = atp.lease_tasks("tests.pull", 1, 60)
    # The sweep is handed the lease while an extension holds the task's lock: it waits,
    # then reads the deadline the extension wrote (without the reading under the lock
    # it would restart the task on what it was handed).
    first, second = interleave(lambda: atp.extend_lease(task, 600),
                               lambda: pull._expire(task.pk, task.daemon_id),
                               pause_after=r'UPDATE "atp_task"')
    first.get()
    assert second.get() is False
    assert state(task) == (Status.RUNNING, 1, 0)
    atp.complete(task)
    assert_invariants()


@pytest.mark.parametrize("write", WRITES)
def test_a_write_racing_the_expiry_is_refused_as_expired(pull_type, write):
    """The expiry holds the task's lock, its restart written: the write waits for it,
    then finds the attempt ended by the expiry."""
    atp.enqueue("tests.pull")
    [task] = atp.lease_tasks("tests.pull", 1, 60)
    expire(task)
    first, second = interleave(lambda: engine.expire_leases(), lambda: WRITES[write](task),
                               pause_after=r'INSERT INTO "atp_logrecord"')
    assert first.get() == 1
    with pytest.raises(LeaseExpired):
        second.get()
    assert state(task) == (Status.ACCEPTED, 1, 1)
    assert_invariants()


@pytest.mark.parametrize("write", WRITES)
def test_a_write_made_while_its_lease_lived_wins_over_an_expiry_waiting_for_it(
        pull_type, write):
    """The write found its lease live under the task's lock; an expiry handed the lease
    as its deadline passed waits for the lock, then finds it ended or extended."""
    atp.enqueue("tests.pull")
    [task] = atp.lease_tasks("tests.pull", 1, 60)
    first, second = interleave(lambda: WRITES[write](task),
                               lambda: pull._expire(task.pk, task.daemon_id),
                               pause_after=r'FROM "atp_instance"')
    first.get()
    assert second.get() is False
    assert state(task) == ({"complete": Status.FINISHED, "fail": Status.FAILED,
                            "extend": Status.RUNNING}[write], 1, 0)
    assert_invariants()


@pytest.mark.parametrize("write", WRITES)
@pytest.mark.parametrize("operator", ["cancel", "set FINISHED"])
def test_a_write_after_an_operator_ended_the_task_is_an_invalid_transition(
        pull_type, write, operator):
    """Not ``LeaseExpired``: the consumer was not too slow; also once the lease ran out
    and the maintenance let go of it."""
    atp.enqueue("tests.pull")
    [task] = atp.lease_tasks("tests.pull", 1, 60)
    if operator == "cancel":
        atp.cancel(task.pk)
    else:
        atp.set_status(task.pk, Status.FINISHED)
    for _ in range(2):
        with pytest.raises(InvalidTransition) as refused:
            WRITES[write](task)
        assert type(refused.value) is InvalidTransition
        expire(task)
        assert engine.expire_leases() == 0  # let go of, nothing restarted
    assert_invariants()


@pytest.mark.parametrize("write", WRITES)
def test_a_write_after_the_consumers_own_end_is_an_invalid_transition(pull_type, write):
    atp.enqueue("tests.pull")
    [task] = atp.lease_tasks("tests.pull", 1, 60)
    atp.complete(task)
    with pytest.raises(InvalidTransition) as refused:
        WRITES[write](task)
    assert type(refused.value) is InvalidTransition


# -- two consumers -------------------------------------------------------------------


def test_two_consumers_racing_never_lease_the_same_task(pull_type):
    tasks = [atp.enqueue("tests.pull") for _ in range(3)]
    first, second = interleave(lambda: atp.lease_tasks("tests.pull", 2, 60, consumer="a"),
                               lambda: atp.lease_tasks("tests.pull", 2, 60, consumer="b"),
                               pause_after=r'UPDATE "atp_task"')
    one, two = [t.pk for t in first.get()], [t.pk for t in second.get()]
    if connection.vendor == "postgresql":
        assert not second.waited, "SKIP LOCKED: the second consumer takes the rows left"
    assert not set(one) & set(two)
    assert sorted(one + two) == [t.pk for t in tasks]
    assert sorted(Task.objects.values_list("daemon__consumer", flat=True)) == ["a", "a", "b"]
    assert_invariants()


def test_check_queue_reports_a_queue_row_whose_tag_is_not_its_tasks(pull_type):
    tagged, untagged = atp.enqueue("tests.pull", tag="a"), atp.enqueue("tests.pull")
    assert_invariants()
    Task.objects.filter(pk=tagged.pk).update(tag="b")
    Task.objects.filter(pk=untagged.pk).update(tag="c")
    assert sorted((v.rule, v.task) for v in check_queue()) == [
        ("queue-row-copies", tagged.pk), ("queue-row-copies", untagged.pk)]
    Task.objects.filter(pk=tagged.pk).update(tag=None)
    assert [v.task for v in check_queue()] == [tagged.pk, untagged.pk]


def test_a_reenqueued_failed_task_keeps_its_tag(pull_type):
    atp.enqueue("tests.pull", tag="red")
    [task] = atp.lease_tasks("tests.pull", 1, 60)
    atp.fail(task, "no")
    atp.reenqueue(task.pk)
    assert [t.pk for t in atp.lease_tasks("tests.pull", 1, 60, tag="red")] == [task.pk]
    assert_invariants()


def test_two_consumers_of_one_name_are_refused_by_the_database_on_every_database(db):
    """A consumer's row is made on its first lease (``get_or_create``): two first leases
    racing must not make two rows of one name, or every later lease of that name fails
    (``MultipleObjectsReturned``). The database refuses the second row, also where it
    has no unique constraints with a condition (MariaDB, MySQL): a daemon's row has no
    consumer name (NULL), not an empty one."""
    from django.db import IntegrityError, transaction
    from django.utils import timezone

    from atp.models import Daemon

    fields = {"host": "h", "pid": 0, "started": timezone.now(), "heartbeat": timezone.now()}
    Daemon.objects.create(consumer="gpu-7", **fields)
    with pytest.raises(IntegrityError), transaction.atomic():
        Daemon.objects.create(consumer="gpu-7", **fields)
    Daemon.objects.create(**fields)
    Daemon.objects.create(**fields)  # any number of daemons, which are no consumers
    assert Daemon.objects.filter(consumer="gpu-7").count() == 1
