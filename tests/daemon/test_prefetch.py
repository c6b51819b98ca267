"""Prefetch: short tasks queued behind each worker's running one, claimed SCHEDULED and
started when the worker reaches them (``atp.daemon.prefetch``)."""

import itertools
import os
import pickle
import signal
from types import SimpleNamespace

import psutil
import pytest

import atp
from atp import engine
from atp.daemon import handoff
from atp.daemon.prefetch import Pace, distribute, weight
from atp.daemon.stopping import Action, Assignment, Ending, Observation, decide
from atp.models import Instance, LogRecord, Task
from atp.states import Status
from tests.processes import wait_until

# -- the pace and the handing out, without a daemon -----------------------------------


def test_no_queue_before_the_pace_is_known_nor_with_prefetch_off():
    assert Pace(16).depth() == 1
    pace = Pace(0)
    pace.task_ended(0.0001)
    pace.round_took(0.004)
    assert pace.depth() == 1


def test_the_queue_covers_a_round_at_the_tasks_pace_up_to_the_cap():
    pace = Pace(16)
    pace.round_took(0.004)
    pace.task_ended(0.001)
    assert pace.depth() == 1 + 5  # 1.5 rounds of 4 ms at 1 ms a task: 6, one of them running
    pace.task_ended(0.00001)
    for _ in range(100):
        pace.task_ended(0.00001)
    assert pace.depth() == 17  # capped


def test_a_long_task_empties_the_queues_at_once_and_short_ones_bring_them_back():
    pace = Pace(16)
    pace.round_took(0.004)
    pace.task_ended(0.0005)
    assert pace.depth() > 1
    pace.task_ended(2.0)
    assert pace.depth() == 1
    for _ in range(60):
        pace.task_ended(0.0005)
    assert pace.depth() > 1


def test_a_worker_dying_empties_the_queues_for_a_while():
    pace = Pace(16)
    pace.round_took(0.004)
    pace.task_ended(0.0005)
    pace.setback()
    assert pace.depth() == 1


class Slot:
    """What ``distribute`` reads of a worker."""

    def __init__(self, queued=0, retiring=False, inflight=0):
        self.queue = [None] * queued
        self.is_retiring = retiring
        self.inflight = inflight

    @property
    def is_idle(self):
        return not self.queue and not self.is_retiring

    def free_slots(self, depth):
        return 0 if self.is_retiring else max(0, depth - len(self.queue))


def task(pk, status=Status.SCHEDULED, data="{}"):
    return SimpleNamespace(pk=pk, status=status, identifier=f"t{pk}", tag=None,
                           progress_message="", inputs=SimpleNamespace(data=data))


def test_started_tasks_go_to_idle_workers_and_the_rest_to_the_shortest_queues():
    idle, short, long, retiring = Slot(), Slot(1), Slot(3), Slot(retiring=True)
    claimed = [task(1, Status.RUNNING), task(2), task(3), task(4), task(5)]
    workers = [long, short, idle, retiring]
    pairs, left = distribute(claimed, workers, {w: w.free_slots(4) for w in workers})
    assert [(worker, t.pk) for worker, t in pairs] == [
        (idle, 1), (short, 2), (idle, 3), (short, 4), (idle, 5)]
    assert left == []


def test_distribute_keeps_claim_order_and_gives_no_worker_more_than_its_room():
    workers = [Slot(), Slot()]
    claimed = [task(1, Status.RUNNING), task(2, Status.RUNNING), task(3), task(4), task(5)]
    pairs, left = distribute(claimed, workers, {w: w.free_slots(2) for w in workers})
    assert [(workers.index(w), t.pk) for w, t in pairs] == [(0, 1), (1, 2), (0, 3), (1, 4)]
    assert [t.pk for t in left] == [5]  # no room: handed back by the supervisor


def test_a_worker_being_stopped_takes_the_task_behind_it_down_without_a_restart():
    stopped = Assignment(1, 1, "t", "h", 10, daemon=None)
    stopped.ending, stopped.reason, stopped.kill_at = Ending.TIME_OUT, "time-out after 10 s", 5.0
    following = Assignment(2, 1, "t", "h", 10, daemon=None)
    following.follow(stopped)
    assert following.ending == Ending.SHUTDOWN and following.kill_at == 5.0
    assert "task id=1 (time-out after 10 s)" in following.reason
    untouched = Assignment(3, 1, "t", "h", 10, daemon=None)
    untouched.follow(Assignment(4, 1, "t", "h", 10, daemon=None))
    assert untouched.ending is None


def test_the_lease_of_a_queued_task_is_not_handed_back():
    running = SimpleNamespace(assignment=Assignment(1, 1, "t", "h", 10, daemon=None),
                              is_suspended=False, is_stopped=lambda: False)
    observation = Observation(
        {1: (Status.RUNNING, 1, False), 2: (Status.SCHEDULED, 1, False),
         3: (Status.SCHEDULED, 1, False)}, {})
    decisions = decide(observation, [running], queued=[2])
    assert [(d.action, d.pk) for d in decisions] == [(Action.HAND_BACK, 3)]


# -- a real daemon -----------------------------------------------------------------

def claims(instances):
    """Return the moments tasks were claimed (their SCHEDULED entries), one per claim."""
    return set(LogRecord.objects.filter(instance_id__in=[i.pk for i in instances],
                                        status=Status.SCHEDULED).values_list("time", flat=True))


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_short_tasks_are_claimed_in_batches_with_their_whole_history(start_daemon):
    atp.register_task_type("tests.noop", "tests.handlers.noop")
    tasks = atp.enqueue_many("tests.noop", [{}] * 300)
    daemon = start_daemon("--burst", "--workers", 1)
    assert daemon.wait(60) == 0, daemon.output()
    assert set(Instance.objects.values_list("status", "attempt", "restarts")) == {
        (Status.FINISHED, 1, 0)}
    # One worker: without prefetch one claim a task; with it, far fewer.
    assert len(claims(tasks)) < len(tasks) / 2
    for instance in Instance.objects.all():
        steps = list(LogRecord.objects.filter(instance=instance).order_by("time", "id")
                     .values_list("status", "time"))
        assert [status for status, _ in steps] == [
            Status.ACCEPTED, Status.SCHEDULED, Status.RUNNING, Status.FINISHED]
        assert steps[2][1] == instance.started and steps[3][1] == instance.finished
        assert instance.created <= steps[1][1] <= instance.started <= instance.finished


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_one_worker_runs_a_prefetched_queue_in_claim_order(start_daemon):
    atp.register_task_type("tests.clock", "tests.handlers.report_clock")
    atp.register_task_type("tests.limited", "tests.handlers.noop", max_concurrency=1)
    tasks = [atp.enqueue("tests.clock", priority=(n * 7) % 5) for n in range(150)]
    limited = atp.enqueue_many("tests.limited", [{}] * 20)
    daemon = start_daemon("--burst", "--workers", 1)
    assert daemon.wait(60) == 0, daemon.output()
    # The order they ran in, by the worker's clock (a start written after it began is
    # dated to within a millisecond or so: too coarse for tasks this short).
    ran = sorted((atp.get_response(task).json()["ns"], task.priority, task.pk) for task in tasks)
    assert [row[1:] for row in ran] == sorted((row[1:] for row in ran),
                                              key=lambda row: (-row[0], row[1]))
    assert len(claims(tasks)) < 75
    # A type with a concurrency limit counts its prefetched tasks: never two leased,
    # from their claim to their end.
    assert set(Instance.objects.filter(pk__in=[t.pk for t in limited])
               .values_list("status", flat=True)) == {Status.FINISHED}
    leases = sorted(
        (LogRecord.objects.get(instance_id=task.pk, status=Status.SCHEDULED).time,
         Instance.objects.get(pk=task.pk).finished) for task in limited)
    for (_, ended), (claimed, _) in itertools.pairwise(leases):
        assert ended <= claimed


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_large_tasks_never_fill_a_busy_workers_pipe(start_daemon):
    """Tasks of 150 kB in and out: more than a few queued in a busy worker's pipe would
    block the supervisor sending them while the worker blocks sending its answer."""
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    payload = {"text": "x" * 150_000}
    tasks = atp.enqueue_many("tests.echo", [payload] * 120)
    daemon = start_daemon("--burst", "--workers", 1)
    assert daemon.wait(60) == 0, daemon.output()
    assert set(Instance.objects.values_list("status", "attempt")) == {(Status.FINISHED, 1)}
    assert atp.get_response(tasks[-1]).json() == payload


@pytest.mark.django_db
@pytest.mark.parametrize("texts", ["short", "longest"])
def test_what_a_task_is_counted_in_the_pipe_covers_what_it_takes_there(texts, daemon):
    """The pipe budget counts each task's ``weight``: were it less than what the task takes
    pickled, a busy worker's pipe could fill and block the supervisor."""
    task_type = atp.register_task_type("tests.noop", "tests.handlers.noop")
    longest = texts == "longest"
    for n in range(50):
        atp.enqueue("tests.noop", {"n": n}, identifier=f"{n:03}" + "x" * 497 if longest else None,
                    tag="t" * 500 if longest else None)
    if longest:
        Instance.objects.update(progress_message="p" * 255)
    claimed = engine.claim_for_daemon(daemon, 50, [task_type.pk])
    message = handoff.pack([(task, task.attempt, task.type.handler, str(daemon))
                            for task in claimed])
    assert len(pickle.dumps(message, pickle.HIGHEST_PROTOCOL)) <= sum(map(weight, claimed))


def test_a_worker_takes_large_tasks_while_idle_and_few_while_busy():
    idle, busy = Slot(), Slot(1, inflight=60_000)
    large = [task(n, data="x" * 100_000) for n in range(3)]
    pairs, left = distribute(large, [idle, busy], {idle: 5, busy: 5})
    assert [(worker, t.pk) for worker, t in pairs] == [(idle, 0)]
    assert [t.pk for t in left] == [1, 2]  # held by the supervisor until a pipe has room


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_prefetch_0_claims_one_task_per_idle_worker(start_daemon):
    atp.register_task_type("tests.noop", "tests.handlers.noop")
    tasks = atp.enqueue_many("tests.noop", [{}] * 60)
    daemon = start_daemon("--burst", "--workers", 1, "--prefetch", 0)
    assert daemon.wait(60) == 0, daemon.output()
    assert len(claims(tasks)) == len(tasks)
    assert set(Instance.objects.values_list("status", flat=True)) == {Status.FINISHED}


def queued_behind(blocker):
    """Start a daemon's worker on short tasks, then on ``blocker`` with short tasks
    queued behind it; return those (SCHEDULED, leased, not started)."""
    wait_until(lambda: Instance.objects.get(pk=blocker.pk).status == Status.RUNNING,
               timeout=30, message="the blocking task running")
    wait_until(lambda: Instance.objects.filter(status=Status.SCHEDULED).exists(),
               timeout=10, message="tasks queued behind it")
    return list(Instance.objects.filter(status=Status.SCHEDULED))


def short_then_blocking_then_short(seconds):
    atp.register_task_type("tests.noop", "tests.handlers.noop")
    atp.register_task_type("tests.sleep", "tests.handlers.sleep", max_restarts=0)
    atp.enqueue_many("tests.noop", [{}] * 200, priority=2)  # the pace: short tasks
    blocker = atp.enqueue("tests.sleep", {"seconds": seconds}, priority=1)
    tail = atp.enqueue_many("tests.noop", [{}] * 40)
    return blocker, tail


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_stopping_daemon_hands_back_what_it_prefetched_unrun_and_no_restart_spent(
        start_daemon):
    blocker, tail = short_then_blocking_then_short(2)
    daemon = start_daemon("--workers", 1)
    queued = queued_behind(blocker)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0, daemon.output()
    assert Instance.objects.get(pk=blocker.pk).status == Status.FINISHED
    for instance in Instance.objects.filter(pk__in=[q.pk for q in queued]):
        assert (instance.status, instance.restarts, instance.started) == (
            Status.ACCEPTED, 0, None)
        last = LogRecord.objects.filter(instance=instance).last()
        assert last.message.startswith("handed back before it started: daemon ")
        assert not LogRecord.objects.filter(instance=instance, status=Status.RUNNING).exists()
    assert Task.objects.filter(daemon__isnull=False).count() == 0


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_with_a_queue_restarts_its_task_and_hands_back_the_queue(start_daemon):
    blocker, tail = short_then_blocking_then_short(60)
    daemon = start_daemon("--workers", 1, "--burst")
    queued = queued_behind(blocker)
    [worker] = psutil.Process(daemon.pid).children()
    os.kill(worker.pid, signal.SIGKILL)
    assert daemon.wait(60) == 0, daemon.output()
    blocker = Instance.objects.get(pk=blocker.pk)
    assert (blocker.status, blocker.restarts) == (Status.FAILED, 0)
    assert LogRecord.objects.filter(instance=blocker).last().message == (
        "worker died: signal SIGKILL; restart limit reached (0 restarts)")
    # Those in its pipe were handed back (those the supervisor still held were not
    # needed to), and all ran once.
    handed_back = LogRecord.objects.filter(
        instance_id__in=[q.pk for q in queued],
        message="handed back before it started: its worker died (signal SIGKILL)")
    assert handed_back.exists()
    for instance in Instance.objects.filter(pk__in=[q.pk for q in queued]):
        assert (instance.status, instance.restarts) == (Status.FINISHED, 0)
    assert set(Instance.objects.filter(pk__in=[t.pk for t in tail])
               .values_list("status", flat=True)) == {Status.FINISHED}
