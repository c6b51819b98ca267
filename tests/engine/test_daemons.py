import datetime
import os
import socket

import pytest
from django.db.models.functions import Now
from django.utils import timezone

from atp import engine
from atp.engine.daemons import daemons_on_host, leases_of, task_states
from atp.models import Daemon, Instance, Task
from atp.states import Status
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


def test_a_daemon_records_where_it_runs_on_the_database_clock():
    daemon = engine.register_daemon(workers=4, types=["a", "b"])
    assert (daemon.host, daemon.pid, daemon.workers, daemon.types) == (socket.gethostname(), os.getpid(), 4, "a,b")
    assert abs((daemon.started - timezone.now()).total_seconds()) < 60
    assert daemon.heartbeat == daemon.started or daemon.heartbeat > daemon.started
    assert str(daemon) == f"{socket.gethostname()}:{os.getpid()}"


def test_retiring_a_daemon_hands_back_its_tasks_and_says_how_many(noop_type):
    daemon = engine.register_daemon()
    running = [TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon) for _ in range(2)]
    taken = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)

    engine.cancel(taken)
    assert engine.retire_daemon(daemon) == 2
    for task in Instance.objects.filter(pk__in=[t.pk for t in running]):
        assert (task.status, task.restarts) == (Status.ACCEPTED, 0)
    assert not Task.objects.filter(daemon=daemon).exists()
    assert not Task.objects.filter(pk=taken.pk).exists()


def test_a_daemon_declared_stopped_learns_it_at_its_next_heartbeat(db):
    daemon = engine.register_daemon()
    assert engine.heartbeat(daemon) is True
    engine.reap_daemon(daemon, "silent")
    before = Daemon.objects.get(pk=daemon.pk).heartbeat
    assert engine.heartbeat(daemon) is False
    assert Daemon.objects.get(pk=daemon.pk).heartbeat == before


def test_each_heartbeat_advances_the_counter_other_daemons_watch(db):
    daemon, other = engine.register_daemon(), engine.register_daemon()
    engine.heartbeat(daemon)
    engine.heartbeat(daemon)
    counters = engine.heartbeat_counters(exclude=other)
    assert {pk: d.beats for pk, d in counters.items()} == {daemon.pk: 2}


def test_a_pull_consumer_and_a_stopped_daemon_have_no_counter_to_watch(db):
    import atp

    atp.register_pull_type("tests.pull")
    atp.enqueue("tests.pull")
    assert atp.lease_tasks("tests.pull", 1, 60)  # registers the consumer
    stopped = engine.register_daemon()
    engine.retire_daemon(stopped)
    assert engine.heartbeat_counters() == {}


def test_a_daemon_judged_silent_at_a_count_is_not_reaped_once_it_beat_again(noop_type):
    """The reaper saw the counter at 1 for the whole time-out; a heartbeat landing before
    the reaper locks the row wins, and the daemon keeps its tasks."""
    daemon = engine.register_daemon()
    task = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)
    engine.heartbeat(daemon)
    engine.heartbeat(daemon)
    assert engine.reap_daemon(daemon, "silent", beats=1) == 0
    assert Daemon.objects.get(pk=daemon.pk).stopped is None
    assert Instance.objects.get(pk=task.pk).status == Status.RUNNING
    assert engine.reap_daemon(daemon, "silent", beats=2) == 1
    assert Instance.objects.get(pk=task.pk).status == Status.ACCEPTED


# -- what a daemon reads of the registry ------------------------------------------------

def test_the_daemons_running_on_a_host_are_those_not_stopped_with_a_process(db):
    import atp

    me, neighbour, stopped = (engine.register_daemon() for _ in range(3))
    engine.retire_daemon(stopped)
    elsewhere = engine.register_daemon()
    Daemon.objects.filter(pk=elsewhere.pk).update(host="elsewhere")
    atp.register_pull_type("tests.pull")
    atp.enqueue("tests.pull")
    assert atp.lease_tasks("tests.pull", 1, 60)  # registers a consumer on this host
    host = socket.gethostname()
    assert [d.pk for d in daemons_on_host(host, exclude=me)] == [neighbour.pk]
    assert {d.pk for d in daemons_on_host(host)} == {me.pk, neighbour.pk}


def test_a_daemons_leases_say_which_tasks_are_past_their_deadline_unless_paused(noop_type):
    daemon = engine.register_daemon()
    running, late, paused = (TaskFactory(type=noop_type, status=status, daemon=daemon)
                             for status in (Status.RUNNING, Status.RUNNING, Status.PAUSED))
    TaskFactory(type=noop_type, status=Status.RUNNING)  # another daemon's
    Task.objects.filter(pk__in=[late.pk, paused.pk]).update(deadline=Now() - datetime.timedelta(seconds=1))
    assert leases_of(daemon) == {
        running.pk: (Status.RUNNING, running.attempt, False),
        late.pk: (Status.RUNNING, late.attempt, True),
        paused.pk: (Status.PAUSED, paused.attempt, False),  # its clock stopped
    }


def test_the_states_of_tasks_are_read_by_key_and_a_deleted_one_is_left_out(
        noop_type, django_assert_num_queries):
    kept, deleted = TaskFactory(type=noop_type), TaskFactory(type=noop_type)
    engine.delete_task(deleted)
    assert task_states([kept.pk, deleted.pk]) == {kept.pk: (Status.ACCEPTED, 0)}
    with django_assert_num_queries(0):
        assert task_states([]) == {}


def test_a_type_deleted_after_the_catalog_was_read_is_left_out_of_what_a_daemon_serves(db):
    # The daemon reads the types, one is unregistered, then it records what it
    # serves: that must record the others, not stop the daemon on the missing key.
    import atp
    from atp.models import Type

    kept = atp.register_task_type("tests.kept", "tests.handlers.echo")
    gone = atp.register_task_type("tests.gone", "tests.handlers.echo")
    daemon = engine.register_daemon()
    atp.unregister_task_type("tests.gone")
    engine.serve_types(daemon, [kept.pk, gone.pk])
    assert list(Daemon.objects.get(pk=daemon.pk).serves.values_list("pk", flat=True)) == [kept.pk]
    assert not Type.objects.filter(pk=gone.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_a_type_unregistered_while_a_daemon_records_what_it_serves_is_not_refused_at_commit():
    """The unregister has read which daemons serve the type; a daemon records that it
    does, and commits; the unregister then deletes the type: its commit was refused by
    the daemon's reference (``make test`` met it once). It locks the type first now: the
    daemon waits, and then finds the type gone."""
    import atp
    from atp.models import Type
    from tests.interleave import interleave

    kept = atp.register_task_type("tests.kept", "tests.handlers.echo")
    gone = atp.register_task_type("tests.gone", "tests.handlers.echo")
    daemon = engine.register_daemon()
    first, second = interleave(lambda: atp.unregister_task_type("tests.gone"),
                               lambda: engine.serve_types(daemon, [kept.pk, gone.pk]),
                               pause_after=r'atp_daemon_serves')
    first.get()
    second.get()
    assert not Type.objects.filter(pk=gone.pk).exists()
    assert list(Daemon.objects.get(pk=daemon.pk).serves.values_list("pk", flat=True)) == [kept.pk]
