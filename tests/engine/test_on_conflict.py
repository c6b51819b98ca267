"""A named enqueue meeting a live task of its name (``on_conflict``), on each engine:
raise, keep that task, or replace its inputs and due time (debounce); a task already
claimed is never replaced."""

import datetime

import pytest
from django.db import connection, transaction

import atp
from atp import engine
from atp.exceptions import InvalidParameter, TaskAlreadyExists
from atp.models import Inputs, Instance, LogRecord, Task
from atp.states import Status
from tests.factories import claim_exactly

S = datetime.timedelta(seconds=1)


def inputs_of(instance):
    return Inputs.objects.get(instance_id=instance.pk).load()


def due_in(instance):
    row = Task.objects.get(pk=instance.pk)
    return (row.not_before - LogRecord.objects.filter(instance=instance).last().time) / S


def test_by_default_a_live_name_is_refused(noop_type, row_counts):
    atp.enqueue("tests.noop", {"v": 1}, identifier="sync-42")
    before = row_counts()
    with pytest.raises(TaskAlreadyExists, match="already has 'sync-42'"):
        atp.enqueue("tests.noop", {"v": 2}, identifier="sync-42", on_conflict="raise")
    assert row_counts() == before


def test_keep_returns_the_live_task_as_it_is(noop_type, daemon, row_counts):
    first = atp.enqueue("tests.noop", {"v": 1}, identifier="sync-42", countdown=30)
    before = row_counts()
    kept = atp.enqueue("tests.noop", {"v": 2}, identifier="sync-42", on_conflict="keep")
    assert kept.pk == first.pk and kept.type.identifier == "tests.noop"
    assert inputs_of(first) == {"v": 1} and row_counts() == before
    Task.objects.filter(pk=first.pk).update(not_before=Task.objects.get(pk=first.pk).enqueued)
    claimed = claim_exactly(first, daemon)
    engine.start(claimed, attempt=claimed.attempt, daemon=daemon)
    # A running task is kept too: there is one live task of a name.
    assert atp.enqueue("tests.noop", {"v": 3}, identifier="sync-42", on_conflict="keep").pk == (
        first.pk)


def test_replace_gives_the_waiting_task_the_new_inputs_and_due_time(noop_type, daemon,
                                                                    row_counts):
    first = atp.enqueue("tests.noop", {"v": 1}, identifier="sync-42", countdown=5)
    before = row_counts()
    replaced = atp.enqueue("tests.noop", {"v": 2}, identifier="sync-42", countdown=30,
                           on_conflict="replace")
    assert replaced.pk == first.pk and replaced.status == Status.ACCEPTED
    assert inputs_of(first) == {"v": 2}
    assert abs(due_in(first) - 30) < 0.1, "its due time was not moved"
    last = LogRecord.objects.filter(instance=first).last()
    assert (last.status, last.attempt) == (None, 0)
    assert last.message.startswith("replaced by a later enqueue of its name: its inputs, "
                                   "and its due time (due at ") and last.message.endswith("in 30 s)")
    assert row_counts() == {**before, "LogRecord": before["LogRecord"] + 1}
    atp.enqueue("tests.noop", {"v": 3}, identifier="sync-42", on_conflict="replace")
    assert "(now)" in LogRecord.objects.filter(instance=first).last().message
    [claimed] = engine.claim_for_daemon(daemon, 1, [noop_type.pk], start=1)
    assert claimed.pk == first.pk and claimed.inputs.load() == {"v": 3}


def test_replace_may_move_the_expiry_too(noop_type):
    first = atp.enqueue("tests.noop", identifier="sync-42", expires=60)
    atp.enqueue("tests.noop", identifier="sync-42", countdown=100, expires=200,
                on_conflict="replace")
    row = Task.objects.get(pk=first.pk)
    assert abs((row.expires - row.not_before) / S - 100) < 0.1
    assert Instance.objects.get(pk=first.pk).expires == row.expires


def test_a_claimed_or_running_task_is_never_replaced(noop_type, daemon, row_counts):
    first = atp.enqueue("tests.noop", {"v": 1}, identifier="sync-42")
    claimed = claim_exactly(first, daemon)
    before = row_counts()
    with pytest.raises(TaskAlreadyExists, match=r"is SCHEDULED \(claimed\): only a waiting task"):
        atp.enqueue("tests.noop", {"v": 2}, identifier="sync-42", on_conflict="replace")
    assert row_counts() == before
    engine.start(claimed, attempt=claimed.attempt, daemon=daemon)
    before = row_counts()
    with pytest.raises(TaskAlreadyExists, match=r"is RUNNING \(claimed\): only a waiting task"):
        atp.enqueue("tests.noop", {"v": 2}, identifier="sync-42", on_conflict="replace")
    assert inputs_of(first) == {"v": 1} and row_counts() == before


@pytest.mark.parametrize("on_conflict", ["keep", "replace"])
def test_a_free_name_is_enqueued_as_usual_and_an_ended_one_stays_taken(noop_type, on_conflict):
    made = atp.enqueue("tests.noop", {"v": 1}, identifier="sync-42", on_conflict=on_conflict)
    assert made.named and inputs_of(made) == {"v": 1}
    atp.cancel(made)
    with pytest.raises(TaskAlreadyExists, match="stays taken until"):
        atp.enqueue("tests.noop", identifier="sync-42", on_conflict=on_conflict)


@pytest.mark.parametrize("options, message", [
    ({"on_conflict": "update"}, "on_conflict must be one of raise, keep, replace"),
    ({"on_conflict": None}, "on_conflict must be one of"),
    ({"on_conflict": "keep", "identifier": None}, "needs an identifier"),
])
def test_a_bad_on_conflict_is_refused(noop_type, options, message):
    options = {"identifier": "sync-42", **options}
    for enqueue in (atp.enqueue, atp.enqueue_on_commit):
        with pytest.raises(InvalidParameter, match=message):
            enqueue("tests.noop", **options)
    assert not Instance.objects.exists()


def test_keep_and_replace_are_refused_in_a_batch_block(noop_type):
    with pytest.raises(InvalidParameter, match="refused in an atp.batch block"):
        with atp.batch("tests.noop"):
            atp.enqueue("tests.noop", identifier="sync-42", on_conflict="replace")


@pytest.mark.django_db(transaction=True)
def test_replace_on_commit_replaces_once_the_transaction_commits(noop_type):
    first = atp.enqueue("tests.noop", {"v": 1}, identifier="sync-42")
    with transaction.atomic():
        atp.enqueue_on_commit("tests.noop", {"v": 2}, identifier="sync-42",
                              on_conflict="replace")
        assert inputs_of(first) == {"v": 1}
    assert inputs_of(first) == {"v": 2}


@pytest.mark.django_db(transaction=True)
def test_a_replace_racing_a_claim_leaves_the_claimed_task_as_it_was(noop_type):
    """The claim takes the task and holds it uncommitted; the replace meets its queue row,
    waits for the claim, and then finds it claimed: it replaces nothing."""
    from tests.interleave import interleave

    claimer = engine.register_daemon()
    task = atp.enqueue("tests.noop", {"v": 1}, identifier="sync-42")
    first, second = interleave(
        lambda: engine.dequeue(claimer),
        lambda: atp.enqueue("tests.noop", {"v": 2}, identifier="sync-42", on_conflict="replace"),
        pause_after=r"atp_logrecord")
    assert [claimed.pk for claimed in first.get()] == [task.pk]
    with pytest.raises(TaskAlreadyExists, match="only a waiting task is replaced"):
        second.get()
    if connection.vendor != "sqlite":
        assert second.waited, "the replace did not meet the claim's lock: no race was run"
    assert inputs_of(task) == {"v": 1}


@pytest.mark.django_db(transaction=True)
def test_a_claim_racing_a_replace_takes_the_task_with_its_new_inputs(noop_type):
    """The replace holds the queue row while it writes; the claim skips it (or, on SQLite,
    waits for it): it never takes the task with half of the new inputs."""
    from tests.interleave import interleave

    claimer = engine.register_daemon()
    task = atp.enqueue("tests.noop", {"v": 1}, identifier="sync-42")
    first, second = interleave(
        lambda: atp.enqueue("tests.noop", {"v": 2}, identifier="sync-42", on_conflict="replace"),
        lambda: engine.claim_for_daemon(claimer, 1, [noop_type.pk], start=1),
        pause_after=r'UPDATE "atp_task"')
    assert first.get().pk == task.pk
    taken = second.get()
    assert taken == [] or taken[0].inputs.load() == {"v": 2}
    if not taken:
        [taken] = engine.claim_for_daemon(claimer, 1, [noop_type.pk], start=1)
        assert taken.inputs.load() == {"v": 2}


def test_a_replace_moving_the_due_time_past_the_kept_expiry_is_refused(noop_type, row_counts):
    first = atp.enqueue("tests.noop", {"v": 1}, identifier="sync-42", countdown=5, expires=60)
    before = row_counts()
    with pytest.raises(InvalidParameter, match="would expire"):
        atp.enqueue("tests.noop", {"v": 2}, identifier="sync-42", countdown=120,
                    on_conflict="replace")
    assert inputs_of(first) == {"v": 1} and row_counts() == before
    assert abs(due_in(first) - 5) < 0.1
