"""Semaphores (``enqueue(..., hold=[...], key=...)``, ``atp.set_semaphore``), on each
engine: a task is claimed only with a slot of every semaphore it holds, all taken at
once; its slots are held while its attempt holds a lease; a busy semaphore's tasks are
skipped, not waited on."""

import pytest
from django.db import connection

import atp
from atp import engine
from atp.engine.semaphores import claim_gated
from atp.exceptions import InvalidParameter
from atp.invariants import check_queue
from atp.models import Hold, Instance, Semaphore, Task, Type
from atp.states import Status


def claimed_pks(daemon, limit=10, **options):
    return [task.pk for task in atp.dequeue(daemon, limit=limit, **options)]


def finish(pk, daemon):
    attempt = Instance.objects.get(pk=pk).attempt
    engine.start(pk, attempt=attempt, daemon=daemon)
    engine.finish(pk, attempt=attempt, daemon=daemon)


def test_a_mutex_has_one_holder_at_a_time(noop_type, daemon):
    first, second = (atp.enqueue("tests.noop", hold=["account-42"]) for _ in range(2))
    other = atp.enqueue("tests.noop")
    assert sorted(claimed_pks(daemon)) == sorted([first.pk, other.pk])
    assert claimed_pks(daemon) == [], "a second holder of the mutex"
    finish(first.pk, daemon)
    assert claimed_pks(daemon) == [second.pk]
    assert Semaphore.objects.get(name="account-42").limit == 1
    assert Type.objects.get(pk=noop_type.pk).gated
    assert dict(Task.objects.values_list("pk", "gated")) == {second.pk: True, other.pk: False}


def test_a_semaphore_of_four_never_has_five_holders(noop_type, daemon):
    atp.set_semaphore("gpu", 4)
    tasks = [atp.enqueue("tests.noop", hold=["gpu"]) for _ in range(6)]
    assert claimed_pks(daemon) == [task.pk for task in tasks[:4]]
    assert claimed_pks(daemon) == []
    finish(tasks[0].pk, daemon)
    finish(tasks[1].pk, daemon)
    assert claimed_pks(daemon) == [task.pk for task in tasks[4:]]


def test_every_semaphore_a_task_holds_or_none(noop_type, daemon):
    """a holds fork-1, b forks 1 and 2, c fork-2: b waits while either is taken."""
    a = atp.enqueue("tests.noop", hold=["fork-1"])
    b = atp.enqueue("tests.noop", hold=["fork-2", "fork-1"])
    c = atp.enqueue("tests.noop", hold=["fork-2"])
    assert claimed_pks(daemon) == [a.pk, c.pk]
    finish(a.pk, daemon)
    assert claimed_pks(daemon) == [], "b took fork-1 while c holds fork-2"
    finish(c.pk, daemon)
    assert claimed_pks(daemon) == [b.pk]


def test_five_philosophers_each_holding_two_forks_never_deadlock(noop_type, daemon):
    philosophers = [atp.enqueue("tests.noop", hold=sorted(
        [f"fork-{n}", f"fork-{(n + 1) % 5}"], reverse=bool(n % 2))) for n in range(5)]
    eaten = []
    while len(eaten) < 5:
        eating = claimed_pks(daemon)
        assert 1 <= len(eating) <= 2, "no philosopher could eat, or three at once"
        for pk in eating:
            finish(pk, daemon)
        eaten += eating
    assert sorted(eaten) == sorted(task.pk for task in philosophers)


def test_a_busy_semaphores_tasks_are_skipped_not_waited_on(db, daemon):
    atp.register_task_type("tests.sync", "tests.handlers.noop", key_concurrency=1)
    busy = [atp.enqueue("tests.sync", key="account-1") for _ in range(30)]
    other = atp.enqueue("tests.sync", key="account-2")
    assert claimed_pks(daemon, limit=5) == [busy[0].pk, other.pk]
    semaphore = Semaphore.objects.get(type__identifier="tests.sync", holds__instance=busy[0])
    assert (semaphore.limit, semaphore.label) == (None, "tests.sync[account-1]")
    assert semaphore.name == f"[{semaphore.type_id}]account-1"


def test_a_keys_limit_is_its_types_key_concurrency(db, daemon):
    atp.register_task_type("tests.sync", "tests.handlers.noop", key_concurrency=2)
    tasks = [atp.enqueue("tests.sync", key="account-1") for _ in range(3)]
    assert claimed_pks(daemon) == [task.pk for task in tasks[:2]]
    engine.update_task_type("tests.sync", key_concurrency=3)
    assert claimed_pks(daemon) == [tasks[2].pk]


def test_a_slot_is_freed_by_every_end_of_a_lease(noop_type, daemon):
    """End, restart, hand-back, a reaper, the daemon's own release after a cancel."""
    ends = {
        "failed": lambda pk, attempt: engine.fail(pk, "boom", attempt=attempt, daemon=daemon),
        "restarted": lambda pk, attempt: engine.restart(pk, "lost", attempt=attempt,
                                                        daemon=daemon),
        "handed back": lambda pk, attempt: engine.hand_back(pk, attempt=attempt, daemon=daemon),
    }
    for end in ends.values():
        task = atp.enqueue("tests.noop", hold=["m"])
        waiting = atp.enqueue("tests.noop", hold=["m"])
        assert claimed_pks(daemon) == [task.pk]
        end(task.pk, Instance.objects.get(pk=task.pk).attempt)
        taken = claimed_pks(daemon)
        assert taken and taken[0] in (task.pk, waiting.pk) and len(taken) == 1
        for pk in (task.pk, waiting.pk):
            if Instance.objects.get(pk=pk).status in (Status.SCHEDULED,):
                finish(pk, daemon)
        for pk in (task.pk, waiting.pk):
            if Instance.objects.get(pk=pk).status == Status.ACCEPTED:
                atp.cancel(pk)
    reaped = atp.enqueue("tests.noop", hold=["m"])
    assert claimed_pks(daemon) == [reaped.pk]
    engine.reap_daemon(daemon, "silent")
    other = engine.register_daemon()
    assert claimed_pks(other) == [reaped.pk], "the reaped daemon's slot was not freed"
    assert [str(v) for v in check_queue()] == []


def test_a_closed_semaphore_starts_nothing_and_reopens(noop_type, daemon):
    atp.set_semaphore("maintenance-window", 0)
    task = atp.enqueue("tests.noop", hold=["maintenance-window"])
    assert claimed_pks(daemon) == []
    atp.set_semaphore("maintenance-window", 1)
    assert claimed_pks(daemon) == [task.pk]


def test_the_daemons_claim_takes_ungated_and_gated_tasks_together(noop_type, daemon):
    gated = atp.enqueue("tests.noop", hold=["m"])
    plain = atp.enqueue("tests.noop")
    claimed = engine.claim_for_daemon(daemon, 5, [noop_type.pk], start=1, gated=[noop_type.pk])
    assert sorted(task.pk for task in claimed) == sorted([gated.pk, plain.pk])
    assert [task.status for task in claimed] == [Status.RUNNING, Status.SCHEDULED]
    assert all(task.inputs is not None for task in claimed)


def test_an_engines_own_claim_takes_no_gated_task(noop_type, daemon):
    other = atp.register_task_type("tests.other", "tests.handlers.noop")
    atp.enqueue("tests.noop", hold=["m"])
    free = atp.enqueue("tests.noop")  # of a gated type, holding nothing: any claim's
    elsewhere = atp.enqueue("tests.other")
    claimed = engine.claim_for_daemon(daemon, 5, [noop_type.pk, other.pk])
    assert [task.pk for task in claimed] == [free.pk, elsewhere.pk]


def test_holds_go_with_their_task_when_it_is_purged(noop_type, daemon):
    task = atp.enqueue("tests.noop", hold=["m", "n"])
    atp.cancel(task)
    assert Hold.objects.filter(instance_id=task.pk).count() == 2
    atp.delete_task(task)
    assert not Hold.objects.exists() and Semaphore.objects.count() == 2


@pytest.mark.parametrize("options, message", [
    ({"hold": "m"}, "hold is a list of semaphore names"),
    ({"hold": ["a b"]}, "a semaphore's name has 1 to 200 letters"),
    ({"hold": ["x[1]"]}, "a semaphore's name has"),
    ({"hold": [""]}, "a semaphore's name has"),
    ({"hold": ["m", "m"]}, "names a semaphore twice"),
    ({"hold": [f"s{n}" for n in range(17)]}, "at most 16 semaphores"),
    ({"key": "k"}, "has no key_concurrency"),
    ({"key": 42}, "a key has 1 to 100"),
])
def test_bad_holds_are_refused(noop_type, options, message):
    with pytest.raises(InvalidParameter, match=message):
        atp.enqueue("tests.noop", **options)
    with pytest.raises(InvalidParameter, match=message):
        atp.enqueue_on_commit("tests.noop", **options)
    assert not Instance.objects.exists() and not Semaphore.objects.exists()
    assert not Type.objects.get(pk=noop_type.pk).gated


@pytest.mark.parametrize("limit", [-1, 2**31, 1.5, "2", True, None])
def test_a_bad_limit_is_refused(db, limit):
    with pytest.raises(InvalidParameter, match="a semaphore's limit is an integer"):
        atp.set_semaphore("m", limit)
    assert not Semaphore.objects.exists()


def test_a_pull_type_takes_no_semaphore(db):
    atp.register_pull_type("tests.pulled")
    with pytest.raises(InvalidParameter, match="is a pull type"):
        atp.enqueue("tests.pulled", hold=["m"])


@pytest.mark.django_db(transaction=True)
def test_two_claims_racing_for_the_last_free_slot_take_it_once(noop_type):
    """The first claim holds the semaphore's row, uncommitted, with the slot taken; the
    second skips the semaphore (another claim holds it) and takes the plain task only."""
    from tests.interleave import interleave

    one, two = engine.register_daemon(), engine.register_daemon()
    atp.set_semaphore("gpu", 2)
    held = atp.enqueue("tests.noop", hold=["gpu"])
    atp.dequeue(one)  # one slot of two taken
    last = [atp.enqueue("tests.noop", hold=["gpu"]) for _ in range(2)]
    plain = atp.enqueue("tests.noop")
    first, second = interleave(lambda: claim_gated(one, 1, [noop_type.pk]),
                               lambda: atp.dequeue(two, limit=5),
                               pause_after=r'INSERT INTO .?atp_logrecord')
    taken = [task.pk for task in first.get()] + [task.pk for task in second.get()]
    assert sorted(taken) == sorted([last[0].pk, plain.pk]), taken
    holding = Task.objects.filter(daemon__isnull=False, instance__holds__semaphore__name="gpu")
    assert holding.count() == 2 and held.pk in holding.values_list("pk", flat=True)
    if connection.vendor == "sqlite":
        return
    assert [task.pk for task in second.get()] == [plain.pk]


def test_an_engines_claim_takes_no_gated_task_even_of_a_type_it_reads_ungated(noop_type,
                                                                               daemon):
    """A claim that read the type before the first gated task of it was committed (a
    claim reading the types and the rows in statements of their own) still skips it."""
    gated = atp.enqueue("tests.noop", hold=["m"])
    Type.objects.filter(pk=noop_type.pk).update(gated=False)
    plain = atp.enqueue("tests.noop")
    claimed = engine.claim_for_daemon(daemon, 5, [noop_type.pk], start=1)
    assert [task.pk for task in claimed] == [plain.pk]
    assert Instance.objects.get(pk=gated.pk).status == Status.ACCEPTED


def test_a_keys_rate_is_a_token_bucket_per_key(db, daemon):
    import datetime

    atp.register_task_type("tests.api", "tests.handlers.noop", key_rate="2/s", key_bucket_size=2)
    calls = {key: [atp.enqueue("tests.api", key=key) for _ in range(5)] for key in ("t1", "t2")}
    first = claimed_pks(daemon)
    assert sorted(first) == sorted([task.pk for task in calls["t1"][:2] + calls["t2"][:2]])
    assert claimed_pks(daemon) == [], "a key's bucket gave more than it held"
    # Half a second later each bucket holds one token again.
    Semaphore.objects.update(tokens_at=models_now() - datetime.timedelta(seconds=0.5))
    assert sorted(claimed_pks(daemon)) == sorted([calls["t1"][2].pk, calls["t2"][2].pk])
    bucket = next(s for s in Semaphore.objects.all() if s.label == "tests.api[t1]")
    assert bucket.tokens is not None and bucket.tokens < 1


def test_a_key_needs_its_types_key_concurrency_or_key_rate(db):
    atp.register_task_type("tests.api", "tests.handlers.noop", key_rate="10/m")
    atp.enqueue("tests.api", key="token-1")
    with pytest.raises(InvalidParameter, match="key_rate must be"):
        atp.register_task_type("tests.bad", "tests.handlers.noop", key_rate="fast")


def models_now():
    from atp.db import database_now
    from atp.engine.base import database

    return database_now(database())


def test_a_task_re_enqueued_by_an_operator_holds_its_semaphores_still(noop_type, daemon):
    """A review found it claimed beside the mutex's holder: its new queue row was not
    marked as holding semaphores."""
    first = atp.enqueue("tests.noop", hold=["account-42"])
    second = atp.enqueue("tests.noop", hold=["account-42"])
    assert claimed_pks(daemon, limit=1) == [first.pk]
    attempt = Instance.objects.get(pk=first.pk).attempt
    engine.start(first.pk, attempt=attempt, daemon=daemon)
    engine.fail(first.pk, "boom", attempt=attempt, daemon=daemon)
    assert claimed_pks(daemon, limit=1) == [second.pk]
    atp.reenqueue(first)
    assert claimed_pks(daemon) == [], "a second holder of the mutex"
    finish(second.pk, daemon)
    assert claimed_pks(daemon) == [first.pk]


def test_a_run_again_holds_the_same_semaphores(db, daemon):
    atp.register_task_type("tests.sync", "tests.handlers.noop", key_concurrency=1)
    ended = atp.enqueue("tests.sync", hold=["gpu"], key="account-1")
    atp.cancel(ended)
    again = atp.run_again(ended)
    assert sorted(semaphore.label for semaphore in Semaphore.objects.filter(
        holds__instance_id=again.pk)) == ["gpu", "tests.sync[account-1]"]
    assert Task.objects.get(pk=again.pk).gated


@pytest.mark.django_db(transaction=True)
def test_the_daemons_claims_take_turns_so_gated_tasks_are_not_starved(noop_type):
    """Plain tasks of another type fill every claim; with gated_first the gated claim
    goes first (a daemon takes turns), and a keyed task of priority 100 is claimed."""
    daemon = engine.register_daemon()
    plain_type = atp.register_task_type("tests.plain", "tests.handlers.noop")
    atp.enqueue_many("tests.plain", [{}] * 5)
    urgent = atp.enqueue("tests.noop", hold=["m"], priority=100)
    types = [noop_type.pk, plain_type.pk]
    taken = engine.claim_for_daemon(daemon, 2, types, gated=[noop_type.pk])
    assert urgent.pk not in [task.pk for task in taken]
    taken = engine.claim_for_daemon(daemon, 2, types, gated=[noop_type.pk], gated_first=True)
    assert taken[0].pk == urgent.pk and len(taken) == 2
    settled, taken = engine.settle_and_claim(daemon, [], 1, types, start=0,
                                             gated=[noop_type.pk], gated_first=True)
    assert (settled, [task.type_id for task in taken]) == (set(), [plain_type.pk])


def test_a_settle_and_claim_taking_gated_tasks_first_writes_the_ends_first(noop_type, daemon):
    """The end it writes frees the mutex for the waiting task it then claims: claimed
    before the end was written, it found the mutex held (a burst daemon then stopped
    with tasks left, in make bench)."""
    from atp.engine.outcomes import Outcome

    running = atp.enqueue("tests.noop", hold=["m"])
    waiting = atp.enqueue("tests.noop", hold=["m"])
    [claimed] = engine.claim_for_daemon(daemon, 1, [noop_type.pk], start=1, gated=[noop_type.pk])
    assert claimed.pk == running.pk
    settled, taken = engine.settle_and_claim(
        daemon, [Outcome.finished(running.pk, claimed.attempt, None)], 2, [noop_type.pk],
        start=1, gated=[noop_type.pk], gated_first=True)
    assert settled == {running.pk} and [task.pk for task in taken] == [waiting.pk]
    assert Instance.objects.get(pk=running.pk).status == Status.FINISHED


def test_the_invariants_hold_of_gated_rows_and_catch_each_way_they_break(db, daemon):
    atp.register_task_type("tests.sync", "tests.handlers.noop", key_concurrency=1)
    keyed = atp.enqueue("tests.sync", key="k")
    mutex = atp.enqueue("tests.sync", hold=["m"])
    plain = atp.enqueue("tests.sync")
    assert check_queue() == []
    Task.objects.filter(pk=keyed.pk).update(gated=False)
    Task.objects.filter(pk=plain.pk).update(gated=True, turn=None)
    key = Semaphore.objects.get(name=f"[{keyed.type_id}]k")
    Task.objects.filter(pk=mutex.pk).update(key=key)
    found = sorted((violation.rule, violation.task, violation.detail[:30])
                   for violation in check_queue())
    assert found == sorted([
        ("gated-in-turn", keyed.pk, "its queue row is not gated but"),
        ("gated-in-turn", keyed.pk, "its ungated queue row has a tu"),
        ("gated-in-turn", plain.pk, "its queue row is gated but its"),
        ("gated-in-turn", plain.pk, "its gated queue row has no tur"),
        ("gated-in-turn", mutex.pk, "its queue row's key is no sema"),
    ]), found
