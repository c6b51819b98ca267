"""Named tasks: a name stays taken for its type's ``dedup_window`` after its task ended,
also once the task is purged (a tombstone keeps it). Time is controlled by moving the
end of a task, or of a tombstone, into the past: no test waits for a window to close.
"""

import datetime

import pytest

import atp
from atp import engine
from atp.exceptions import TaskAlreadyExists
from atp.models import Instance, Task, Tombstone, Type
from atp.states import Status
from tests.factories import TaskFactory
from tests.interleave import interleave

pytestmark = pytest.mark.django_db

ENDED = [Status.FINISHED, Status.FAILED, Status.CANCELLED]


def days_ago(days):
    return datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=days)


@pytest.mark.parametrize("status", ENDED)
def test_a_name_stays_taken_for_nine_days_after_its_task_ended(noop_type, status, row_counts):
    ended = TaskFactory(type=noop_type, identifier="invoice-42", status=status)
    before = row_counts()
    with pytest.raises(TaskAlreadyExists, match=r"'invoice-42' .* stays taken until .*9 days"):
        atp.enqueue("tests.noop", identifier="invoice-42")
    assert row_counts() == before
    Instance.objects.filter(pk=ended.pk).update(finished=days_ago(9.01))
    again = atp.enqueue("tests.noop", identifier="invoice-42")
    assert again.named and again.pk != ended.pk


def test_the_window_is_the_types(noop_type):
    engine.update_task_type("tests.noop", dedup_window=60)
    ended = TaskFactory(type=noop_type, identifier="ping", status=Status.FINISHED)
    with pytest.raises(TaskAlreadyExists):
        atp.enqueue("tests.noop", identifier="ping")
    Instance.objects.filter(pk=ended.pk).update(finished=ended.finished - datetime.timedelta(seconds=61))
    atp.enqueue("tests.noop", identifier="ping")


def test_a_purged_task_leaves_a_tombstone_that_keeps_its_name(noop_type):
    ended = TaskFactory(type=noop_type, identifier="report-7", status=Status.FINISHED)
    assert atp.purge_finished(older_than=0) == 1
    assert not Instance.objects.filter(pk=ended.pk).exists()
    stone = Tombstone.objects.get()
    assert (stone.type_id, stone.identifier, stone.ended) == (noop_type.pk, "report-7", ended.finished)
    with pytest.raises(TaskAlreadyExists, match="stays taken"):
        atp.enqueue("tests.noop", identifier="report-7")
    Tombstone.objects.update(ended=days_ago(10))
    atp.enqueue("tests.noop", identifier="report-7")


def test_deleting_an_ended_task_leaves_a_tombstone_too(noop_type):
    ended = TaskFactory(type=noop_type, identifier="one-off", status=Status.CANCELLED)
    atp.delete_task(ended)
    assert list(Tombstone.objects.values_list("identifier", flat=True)) == ["one-off"]
    with pytest.raises(TaskAlreadyExists):
        atp.enqueue("tests.noop", identifier="one-off")


def test_drawn_identifiers_and_closed_windows_leave_no_tombstone(noop_type):
    for task in atp.enqueue_many("tests.noop", [{}] * 3) + [atp.enqueue("tests.noop")]:
        engine.cancel(task)
    old = TaskFactory(type=noop_type, identifier="old", status=Status.FINISHED)
    Instance.objects.filter(pk=old.pk).update(finished=days_ago(10))
    assert atp.purge_finished(older_than=0) == 5
    assert not Tombstone.objects.exists()


def test_without_a_window_an_ended_tasks_name_is_free_and_leaves_no_tombstone(noop_type):
    engine.update_task_type("tests.noop", dedup_window=None)
    TaskFactory(type=noop_type, identifier="again", status=Status.FINISHED)
    atp.enqueue("tests.noop", identifier="again")
    atp.purge_finished(older_than=0)
    assert not Tombstone.objects.exists()


def test_tombstones_are_purged_in_batches_once_their_window_closed(noop_type):
    for number in range(5):
        TaskFactory(type=noop_type, identifier=f"n{number}", status=Status.FINISHED)
    atp.purge_finished(older_than=0)
    assert Tombstone.objects.count() == 5
    Tombstone.objects.filter(identifier__in=["n0", "n1", "n2"]).update(ended=days_ago(9.01))
    assert engine.purge_tombstones(batch_size=2, max_batches=1) == 2
    assert engine.purge_tombstones(batch_size=2) == 1
    assert sorted(Tombstone.objects.values_list("identifier", flat=True)) == ["n3", "n4"]
    engine.update_task_type("tests.noop", dedup_window=None)  # no window: none is kept
    assert engine.purge_tombstones() == 2


def test_a_second_purge_of_the_same_name_keeps_one_tombstone(noop_type):
    engine.update_task_type("tests.noop", dedup_window=60)
    first = TaskFactory(type=noop_type, identifier="twice", status=Status.FINISHED)
    atp.purge_finished(older_than=0)
    Tombstone.objects.update(ended=first.finished - datetime.timedelta(seconds=61))
    second = TaskFactory(type=noop_type, identifier="twice", status=Status.FINISHED)
    atp.purge_finished(older_than=0)
    assert list(Tombstone.objects.values_list("ended", flat=True)) == [second.finished]


def test_a_live_name_is_refused_whatever_the_window(noop_type):
    engine.update_task_type("tests.noop", dedup_window=None)
    atp.enqueue("tests.noop", identifier="live")
    with pytest.raises(TaskAlreadyExists, match="a live task"):
        atp.enqueue("tests.noop", identifier="live")
    assert Task.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_name_enqueued_while_its_task_ends_is_refused(noop_type):
    """The enqueue's queue row waits for the ending task's (the name is unique among
    live tasks), and the window is read after it: the end is seen, not missed."""
    live = atp.enqueue("tests.noop", identifier="racing")
    first, second = interleave(lambda: engine.cancel(live),
                               lambda: atp.enqueue("tests.noop", identifier="racing"),
                               pause_after=r'INSERT INTO "atp_logrecord"')
    first.get()
    with pytest.raises(TaskAlreadyExists, match="stays taken"):
        second.get()
    assert list(Instance.objects.values_list("status", flat=True)) == [Status.CANCELLED]


def test_two_ended_tasks_of_one_name_purged_together_leave_one_tombstone(noop_type):
    """Ended while the type had no window, purged once it has one (a review found the
    purge refused by PostgreSQL: one upsert met the same name twice)."""
    engine.update_task_type("tests.noop", dedup_window=None)
    ended = []
    for _ in range(2):
        ended.append(TaskFactory(type=noop_type, identifier="nightly", status=Status.FINISHED))
    engine.update_task_type("tests.noop", dedup_window=datetime.timedelta(days=9))
    assert atp.purge_finished(older_than=0) == 2
    assert list(Tombstone.objects.values_list("identifier", "ended")) == [
        ("nightly", max(task.finished for task in ended))]


def test_an_older_end_never_replaces_a_later_tombstone(noop_type):
    later = TaskFactory(type=noop_type, identifier="kept", status=Status.FINISHED)
    atp.purge_finished(older_than=0)
    engine.update_task_type("tests.noop", dedup_window=None)
    older = TaskFactory(type=noop_type, identifier="kept", status=Status.FINISHED)
    Instance.objects.filter(pk=older.pk).update(finished=later.finished - datetime.timedelta(hours=1))
    engine.update_task_type("tests.noop", dedup_window=datetime.timedelta(days=9))
    atp.purge_finished(older_than=0)
    assert list(Tombstone.objects.values_list("ended", flat=True)) == [later.finished]


def test_a_window_set_since_a_process_read_the_type_holds_at_once(noop_type):
    """The one-statement enqueue refuses a named task of a type that got a window since
    this process cached it: the name is then checked."""
    engine.update_task_type("tests.noop", dedup_window=None)
    TaskFactory(type=noop_type, identifier="late", status=Status.FINISHED)
    atp.enqueue("tests.noop", identifier="warm")  # the type, without a window, cached
    Type.objects.filter(pk=noop_type.pk).update(dedup_window=datetime.timedelta(days=9))
    with pytest.raises(TaskAlreadyExists, match="stays taken"):
        atp.enqueue("tests.noop", identifier="late")


def test_a_named_task_of_a_type_without_window_is_marked_named(noop_type):
    engine.update_task_type("tests.noop", dedup_window=None)
    task = atp.enqueue("tests.noop", identifier="plain")
    assert Instance.objects.get(pk=task.pk).named
    assert not Instance.objects.get(pk=atp.enqueue("tests.noop").pk).named
