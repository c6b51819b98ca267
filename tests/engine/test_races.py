"""Queue verbs racing each other, in a fixed order of their statements (``tests.interleave``).

Each test pauses one verb inside its transaction at the statement where the race
used to bite, runs a second verb on another connection until it is done or waits
for a lock, then lets the first go on; the queue invariants must hold at the end,
and the queue must still serve. The races are real on PostgreSQL; on SQLite the
write lock serialises whole transactions, and the same tests check that nothing
else goes wrong there.
"""

import pytest
from django.db import connection

import atp
from atp import engine
from atp.exceptions import DaemonStopped, InvalidTransition
from atp.invariants import check_queue
from atp.models import Instance, LogRecord, Task
from atp.states import Status
from tests.factories import TaskFactory
from tests.interleave import interleave

pytestmark = pytest.mark.django_db(transaction=True)

#: The last statement of a verb that moves a task: its history entry.
LOGGED = r'INSERT INTO "atp_logrecord"'


def assert_invariants(**options):
    assert [str(v) for v in check_queue(**options)] == []


def running_task(daemon):
    return TaskFactory(type=atp.get_type("tests.noop"), status=Status.RUNNING, daemon=daemon)


# The verbs that give up a lease while an operator may be ending the same task.
LEASE_GIVERS = {
    "restart": (lambda pk, d: engine.restart(pk, "worker died", attempt=1, daemon=d), LOGGED),
    "hand back": (lambda pk, d: engine.hand_back(pk, "stopping", attempt=1, daemon=d), LOGGED),
    "release": (lambda pk, d: engine.release(pk, daemon=d), r'UPDATE "atp_task"'),
}


@pytest.mark.parametrize("giver", LEASE_GIVERS)
def test_a_cancel_racing_a_lease_given_up_leaves_no_stray_queue_row(noop_type, daemon, giver):
    task = running_task(daemon)
    if giver == "release":
        atp.reenqueue(task)  # release lets go of a task an operator took away
    give_up, pause_after = LEASE_GIVERS[giver]
    first, second = interleave(lambda: give_up(task.pk, daemon), lambda: engine.cancel(task.pk),
                               pause_after=pause_after)
    first.get()
    second.get()
    assert Instance.objects.get(pk=task.pk).status == Status.CANCELLED
    assert_invariants()
    # The queue still serves: the next claim takes the next task.
    waiting = atp.enqueue("tests.noop")
    assert [t.pk for t in atp.dequeue(engine.register_daemon())] == [waiting.pk]


def test_a_reenqueue_racing_a_release_keeps_the_task_queued(noop_type, daemon):
    task = running_task(daemon)
    atp.cancel(task)  # still leased: its daemon lets go once the worker is stopped
    first, second = interleave(lambda: engine.release(task.pk, daemon=daemon),
                               lambda: engine.reenqueue(task.pk),
                               pause_after=r'FROM "atp_instance"')
    assert first.get() is True
    second.get()
    assert Instance.objects.get(pk=task.pk).status == Status.ACCEPTED
    assert_invariants()
    [claimed] = atp.dequeue(engine.register_daemon())
    assert claimed.pk == task.pk


def test_a_claim_racing_the_reaper_of_its_daemon_is_restarted_not_stranded(noop_type, daemon):
    queued = atp.enqueue("tests.noop")
    first, second = interleave(lambda: engine.dequeue(daemon),
                               lambda: engine.reap_daemon(daemon, "silent"),
                               pause_after=r'atp_logrecord')
    claimed, restarted = first.get(), second.get()
    if claimed:  # the claim committed first: the reaper restarted what it took
        assert ([t.pk for t in claimed], restarted) == ([queued.pk], 1)
    task = Instance.objects.get(pk=queued.pk)
    assert task.status == Status.ACCEPTED
    assert_invariants()


def test_a_stopped_daemon_claims_nothing(noop_type, daemon):
    queued = atp.enqueue("tests.noop")
    engine.reap_daemon(daemon, "silent")
    with pytest.raises(DaemonStopped, match="was declared stopped"):
        engine.dequeue(daemon)
    assert Instance.objects.get(pk=queued.pk).status == Status.ACCEPTED
    assert Task.objects.get(pk=queued.pk).daemon is None


@pytest.mark.parametrize("limited", [False, True], ids=["no limit", "max_concurrency"])
def test_a_claim_repairs_an_ended_tasks_stray_row_and_takes_the_others(noop_type, daemon, limited):
    if limited:
        atp.register_task_type("tests.noop", "tests.handlers.noop", max_concurrency=5)
    stray, good = atp.enqueue("tests.noop"), atp.enqueue("tests.noop")
    # What the cancel race used to leave behind: an ended task with a waiting row.
    Instance.objects.filter(pk=stray.pk).update(status=Status.CANCELLED)
    assert [t.pk for t in atp.dequeue(daemon, limit=2)] == [good.pk]
    assert not Task.objects.filter(pk=stray.pk).exists()
    repaired = LogRecord.objects.filter(instance=stray).last()
    assert "removed its stray queue row" in repaired.message


def test_a_claim_does_not_take_an_in_flight_task_whose_row_lost_its_lease(noop_type, daemon):
    broken = running_task(daemon)
    good = atp.enqueue("tests.noop")
    Task.objects.filter(pk=broken.pk).update(daemon=None)
    other = engine.register_daemon()
    assert [t.pk for t in atp.dequeue(other, limit=2)] == [good.pk]
    # Back in the queue, but not before any worker still running it has been stopped.
    repaired = Instance.objects.get(pk=broken.pk)
    assert (repaired.status, repaired.attempt) == (Status.ACCEPTED, 1)
    assert atp.dequeue(other) == []


@pytest.mark.parametrize("take_away", [
    lambda pk: atp.cancel(pk), lambda pk: atp.reenqueue(pk),
    lambda pk: atp.set_status(pk, Status.FINISHED),
], ids=["cancel", "reenqueue", "operator finish"])
def test_max_concurrency_counts_a_worker_still_being_stopped(db, daemon, take_away):
    atp.register_task_type("tests.single", "tests.handlers.noop", max_concurrency=1)
    running = TaskFactory(type=atp.get_type("tests.single"), status=Status.RUNNING, daemon=daemon)
    waiting = atp.enqueue("tests.single")
    take_away(running.pk)
    other = engine.register_daemon()
    assert atp.dequeue(other, limit=2) == [], "claimed beyond max_concurrency"
    engine.release(running.pk, daemon=daemon)  # its worker is gone now
    claimed = [t.pk for t in atp.dequeue(other, limit=2)]
    assert len(claimed) == 1 and claimed[0] in (running.pk, waiting.pk)


@pytest.mark.parametrize("known", [False, True], ids=["limit met", "limit known"])
def test_two_claims_racing_for_the_last_slot_of_a_limited_type_take_it_once(db, known):
    """The second claim waits for the first's lock of the type, then counts the leases
    as the first committed them: not as they were when its own statement began."""
    atp.register_task_type("tests.single", "tests.handlers.noop", max_concurrency=1)
    type_id = atp.get_type("tests.single").pk
    queued = [atp.enqueue("tests.single") for _ in range(2)]
    first_daemon, second_daemon = engine.register_daemon(), engine.register_daemon()

    def claim(daemon):
        return engine.claim_for_daemon(daemon, 2, [type_id], start=1, limited=known)

    # Paused once it has claimed, uncommitted: after its history entries, but not after
    # PostgreSQL's plain claim (``kinds AS``, no ``quota AS``), which meets the limit,
    # takes nothing and hands over to the claim within limits.
    first, second = interleave(lambda: claim(first_daemon), lambda: claim(second_daemon),
                               pause_after=r"(?s)quota AS|^(?!.*kinds AS).*atp_logrecord")
    claimed = [task.pk for task in first.get() + second.get()]
    assert claimed == [queued[0].pk], "a limited type's last slot was taken twice"
    assert Task.objects.filter(daemon__isnull=False).count() == 1
    assert_invariants()


def test_an_enqueue_does_not_wait_for_a_claim_within_limits_of_its_type(db):
    atp.register_task_type("tests.single", "tests.handlers.noop", max_concurrency=1)
    type_id = atp.get_type("tests.single").pk
    queued = atp.enqueue("tests.single")
    daemon = engine.register_daemon()
    first, second = interleave(
        lambda: engine.claim_for_daemon(daemon, 1, [type_id], limited=True),
        lambda: atp.enqueue("tests.single"),
        pause_after=r"(?s)quota AS|^(?!.*kinds AS).*atp_logrecord")
    assert [task.pk for task in first.get()] == [queued.pk]
    assert second.get().pk != queued.pk
    if connection.vendor == "postgresql":  # SQLite has one writer at a time
        assert not second.waited, "an enqueue waited for a claim of its type"


def test_operator_verbs_on_a_task_its_daemon_hands_back_meanwhile(noop_type, daemon):
    """A pause racing a hand-back: refused or applied, never half of each."""
    task = running_task(daemon)
    first, second = interleave(
        lambda: engine.hand_back(task.pk, "stopping", attempt=1, daemon=daemon),
        lambda: engine.pause(task.pk), pause_after=LOGGED)
    first.get()
    with pytest.raises(InvalidTransition):
        second.get()
    assert Instance.objects.get(pk=task.pk).status == Status.ACCEPTED
    assert Task.objects.get(pk=task.pk).paused_since is None
    assert_invariants()


def test_a_reaper_does_not_restart_a_task_another_daemon_took_since_it_looked(noop_type, daemon):
    """The reaper lists the dead daemon's leases, then lets go of each under lock: a task
    handed back and claimed by another daemon in between is not that daemon's to lose."""
    task = running_task(daemon)
    other = engine.register_daemon()

    def hand_back_and_claim_elsewhere():
        engine.hand_back(task.pk, "stopping", attempt=1, daemon=daemon)
        return engine.dequeue(other)

    first, second = interleave(lambda: engine.restart_leases(daemon, "reaped"),
                               hand_back_and_claim_elsewhere,
                               pause_after=r'FROM "atp_task" WHERE "atp_task"."daemon_id" =')
    first.get()
    now = Instance.objects.get(pk=task.pk)
    if second.error is None:  # it got in between (PostgreSQL)
        assert (now.status, now.attempt, now.restarts) == (Status.SCHEDULED, 2, 0)
        assert Task.objects.get(pk=task.pk).daemon_id == other.pk
    else:  # it waited for the reaper (SQLite), then found the task restarted
        assert (now.status, now.restarts) == (Status.ACCEPTED, 1)
    assert_invariants()


def test_a_type_limited_between_the_locks_and_the_count_gets_no_slot_that_round(db):
    """The claim within limits locks the types limited when it begins; a type limited
    after that (here while another claim of it holds its lock and an uncommitted lease)
    must not be counted without its lock: it waits for the next round."""
    from atp.engine.engines import engine as chosen

    if chosen().name != "postgresql":
        pytest.skip("PostgreSQL's engine: SQLite serialises whole claims")
    import psycopg

    atp.register_task_type("tests.limited", "tests.handlers.noop", max_concurrency=5)
    atp.register_task_type("tests.late", "tests.handlers.noop")
    limited, late = atp.get_type("tests.limited"), atp.get_type("tests.late")
    held, free = atp.enqueue("tests.late"), atp.enqueue("tests.late")
    claimer, other = engine.register_daemon(), engine.register_daemon()
    settings = connection.settings_dict
    conninfo = {"dbname": settings["NAME"], "user": settings["USER"],
                "host": settings["HOST"] or None, "port": settings["PORT"] or None,
                "password": settings["PASSWORD"] or None}
    operator = psycopg.connect(**conninfo, autocommit=True)
    rival = psycopg.connect(**conninfo)  # another claim of tests.late, not committed yet
    done = []

    def between_the_statements(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if "atp.locked_types" in sql and not done:
            done.append(True)
            operator.execute("UPDATE atp_type SET max_concurrency = 1 WHERE id = %s", [late.pk])
            rival.execute("SELECT id FROM atp_type WHERE id = %s FOR NO KEY UPDATE", [late.pk])
            rival.execute("UPDATE atp_task SET daemon_id = %s WHERE instance_id = %s",
                          [other.pk, held.pk])
        return result

    try:
        with connection.execute_wrapper(between_the_statements):
            claimed = engine.claim_for_daemon(claimer, 5, [limited.pk, late.pk], limited=True)
        assert done, "the claim within limits did not run"
        assert free.pk not in [task.pk for task in claimed], "counted without its lock"
        rival.commit()
    finally:
        rival.close()
        operator.close()
    assert Task.objects.filter(type=late, daemon__isnull=False).count() == 1


def test_a_purge_racing_a_claim_never_cancels_a_claimed_task(noop_type, daemon):
    queued = atp.enqueue_many("tests.noop", [{}] * 4)
    first, second = interleave(lambda: atp.purge_type("tests.noop", batch_size=2),
                               lambda: atp.dequeue(daemon, limit=4),
                               pause_after=r'FROM "atp_instance"')
    purged, claimed = first.get(), second.get()
    states = {task.pk: Instance.objects.get(pk=task.pk).status for task in queued}
    assert purged + len(claimed) == 4
    assert {states[task.pk] for task in claimed} <= {Status.SCHEDULED}
    assert list(states.values()).count(Status.CANCELLED) == purged
    assert_invariants()
