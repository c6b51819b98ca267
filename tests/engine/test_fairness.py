"""Fairness between keys (issue 21, item 2), on each engine: the gated tasks are claimed
in turns (``Task.turn``, ``atp.engine.semaphores.turns``), so a key with a long backlog
does not hold up the keys that come after it, and priority still comes first."""

import datetime
import time

from django.db import connection

import atp
from atp import engine
from atp.db import database_now
from atp.engine.orm import GATED_CHUNK
from atp.engine.semaphores import TURN
from atp.invariants import check_queue
from atp.models import Task


def drain(daemon, claims, *, per_claim=4):
    """Claim up to ``per_claim`` tasks at a time and finish each, until ``claims`` tasks
    have started; return their keys in the order they were claimed."""
    order = []
    while len(order) < claims:
        taken = atp.dequeue(daemon, limit=per_claim)
        assert taken, f"nothing to claim after {len(order)} claims"
        for task in taken:
            order.append(task.pk)
            engine.start(task.pk, attempt=task.attempt, daemon=daemon)
            engine.finish(task.pk, attempt=task.attempt, daemon=daemon)
    return order[:claims]


def test_a_key_with_ten_waiting_is_not_held_up_by_one_with_ten_thousand(db, daemon):
    """The acceptance test: the 10 tasks of a key enqueued after 10,000 of another all
    start within the first 100 claims (in not_before order they came after all 10,000,
    which fill every claim: each key may run 4 at once)."""
    atp.register_task_type("tests.sync", "tests.handlers.noop", key_concurrency=4)
    atp.enqueue_many("tests.sync", [None] * 10_000, key="big")
    small = {task.pk for task in atp.enqueue_many("tests.sync", [None] * 10, key="small")}
    order = drain(daemon, 100)
    started = [index for index, pk in enumerate(order) if pk in small]
    assert len(started) == 10, f"only {len(started)} of the small key's 10 in 100 claims"
    # The keys take turns: the small key's tasks are spread among the first 40.
    assert started[-1] < 40, started


def test_a_task_holding_no_key_does_not_wait_behind_a_keys_backlog(db, daemon):
    atp.register_task_type("tests.sync", "tests.handlers.noop", key_concurrency=1)
    atp.enqueue_many("tests.sync", [None] * 1_000, key="big")
    mutex = atp.enqueue("tests.sync", hold=["report"])
    order = drain(daemon, 10, per_claim=1)
    assert mutex.pk in order, order


def test_priority_comes_before_turns(db, daemon):
    atp.register_task_type("tests.sync", "tests.handlers.noop", key_concurrency=1)
    atp.enqueue_many("tests.sync", [None] * 50, key="big")
    urgent = atp.enqueue("tests.sync", key="big", priority=5)
    atp.enqueue("tests.sync", key="other")
    assert drain(daemon, 1, per_claim=1) == [urgent.pk]


def test_a_keys_tasks_take_turns_a_second_apart_after_its_last_waiting(db, daemon):
    atp.register_task_type("tests.sync", "tests.handlers.noop", key_concurrency=1)
    first = atp.enqueue_many("tests.sync", [None] * 3, key="k")
    turns = [Task.objects.get(pk=task.pk).turn for task in first]
    assert turns[0] == Task.objects.get(pk=first[0].pk).not_before
    assert [later - earlier for earlier, later in zip(turns, turns[1:], strict=False)] == [
        TURN, TURN]
    then = atp.enqueue("tests.sync", key="k")
    assert Task.objects.get(pk=then.pk).turn == turns[-1] + TURN
    other = atp.enqueue("tests.sync", key="other")
    # Another key starts where the claims are: the first turn waiting (none in service).
    assert Task.objects.get(pk=other.pk).turn == turns[0]


def test_a_key_none_of_whose_tasks_waits_takes_its_turn_from_now(db, daemon):
    atp.register_task_type("tests.sync", "tests.handlers.noop", key_concurrency=2)
    tasks = atp.enqueue_many("tests.sync", [None] * 2, key="k")
    assert sorted(drain(daemon, 2, per_claim=2)) == sorted(task.pk for task in tasks)
    again = atp.enqueue("tests.sync", key="k")
    row = Task.objects.get(pk=again.pk)
    assert row.turn == row.not_before, "the finished backlog still pushed the key back"


def test_a_retried_or_rerun_gated_task_takes_its_turn_when_due(db, daemon):
    atp.register_task_type("tests.sync", "tests.handlers.noop", key_concurrency=1)
    atp.enqueue_many("tests.sync", [None] * 5, key="k")
    later = atp.enqueue("tests.sync", key="k", countdown=3600)
    atp.run_now(later)
    row = Task.objects.get(pk=later.pk)
    assert row.turn == row.not_before
    plain = atp.enqueue("tests.sync")
    atp.run_now(atp.enqueue("tests.sync", countdown=60))
    assert Task.objects.get(pk=plain.pk).turn is None  # holding nothing: no turn
    assert not Task.objects.filter(gated=False, turn__isnull=False).exists()


def test_the_gated_claim_reads_on_past_a_chunk_of_a_full_keys_tasks(db, daemon):
    """More waiting rows of a full key than a chunk (``GATED_CHUNK``) come first, by
    priority: the claim reads on past them to another key's task."""
    atp.register_task_type("tests.sync", "tests.handlers.noop", key_concurrency=1)
    running = atp.enqueue("tests.sync", key="busy")
    assert [task.pk for task in atp.dequeue(daemon)] == [running.pk]
    atp.enqueue_many("tests.sync", [None] * (GATED_CHUNK + 50), key="busy", priority=1)
    other = atp.enqueue("tests.sync", key="free")
    assert [task.pk for task in atp.dequeue(daemon, limit=10)] == [other.pk]


def test_a_keys_delayed_task_does_not_push_back_its_tasks_due_now(db, daemon):
    """Found by review: a task of the key due tomorrow gave the key's next task, due now,
    a turn after tomorrow, behind every other key's."""
    atp.register_task_type("tests.sync", "tests.handlers.noop", key_concurrency=1)
    atp.enqueue("tests.sync", key="k", countdown=86_400)
    due_now = atp.enqueue("tests.sync", key="k")
    for other in range(20):
        atp.enqueue("tests.sync", key=f"o{other}")
    assert drain(daemon, 21, per_claim=1).index(due_now.pk) < 2


def test_a_keys_low_priority_backlog_does_not_push_back_its_urgent_task(db, daemon):
    """Found by review: turns were counted across priorities."""
    atp.register_task_type("tests.sync", "tests.handlers.noop", key_concurrency=1)
    atp.enqueue_many("tests.sync", [None] * 1_000, key="a")
    urgent = atp.enqueue("tests.sync", key="a", priority=5)
    for other in range(20):
        atp.enqueue("tests.sync", key=f"o{other}", priority=5)
    assert drain(daemon, 21, per_claim=1).index(urgent.pk) < 2


def test_a_past_eta_does_not_put_a_keys_backlog_ahead_of_every_other_key(db, daemon):
    """Found by review: a key's turns began at its due time, in the past."""
    atp.register_task_type("tests.sync", "tests.handlers.noop", key_concurrency=4)
    yesterday = database_now(connection.alias) - datetime.timedelta(days=1)
    atp.enqueue_many("tests.sync", [None] * 1_000, key="big", eta=yesterday)
    small = atp.enqueue("tests.sync", key="small")
    assert small.pk in drain(daemon, 8)


def test_a_backlog_served_slower_than_its_turns_does_not_hold_up_a_new_key(db, daemon):
    """Found by review: with the clock for virtual time, a backlog left waiting (the
    workers busy) had its turns fall into the past, and a key enqueued later queued
    behind all of them. A new key starts where the claims are."""
    atp.register_task_type("tests.sync", "tests.handlers.noop", key_concurrency=4)
    atp.enqueue_many("tests.sync", [None] * 10, key="big")
    time.sleep(2)  # nothing claimed meanwhile
    small = atp.enqueue("tests.sync", key="small")
    assert drain(daemon, 11, per_claim=1).index(small.pk) < 2


def test_a_gated_row_without_a_turn_is_claimed_by_no_claim_and_reported(db, daemon):
    """Found by review: a gated row without a turn (written by code from before migration
    0026, still running during an upgrade) at the end of a chunk stopped every gated
    claim. Now no claim takes one (the engines' claims read the rows without a turn,
    but never a gated one), the others are claimed past it, and the invariants report
    it."""
    atp.register_task_type("tests.sync", "tests.handlers.noop")
    running = atp.enqueue("tests.sync", hold=["m"])
    assert [task.pk for task in atp.dequeue(daemon)] == [running.pk]
    atp.enqueue_many("tests.sync", [None] * (GATED_CHUNK + 40), hold=["m"])
    free = atp.enqueue("tests.sync", hold=["n"])
    turnless = atp.enqueue("tests.sync", hold=["o"])
    Task.objects.filter(pk=turnless.pk).update(turn=None)
    assert [task.pk for task in atp.dequeue(daemon, limit=5)] == [free.pk]
    assert [(violation.rule, violation.task) for violation in check_queue()] == [
        ("gated-in-turn", turnless.pk)]
