import datetime

import pytest

import atp
from atp.daemon.pool import exit_cause
from atp.models import Daemon, Instance, LogRecord
from atp.states import Status

pytestmark = pytest.mark.slow

LIMIT = "restart limit reached (1 restarts)"
EXPECTED_END = {
    "exit_3": f"worker died: exit code 3; {LIMIT}",
    "hard_exit_0": f"worker died: exit code 0; {LIMIT}",
    "abort": f"worker died: signal SIGABRT; {LIMIT}",
    "segfault": f"worker died: signal SIGSEGV; {LIMIT}",
    "killed": f"worker died: signal SIGKILL; {LIMIT}",
    "spin": f"time-out after 1 s; {LIMIT}",
    "ignore_sigterm": f"time-out after 1 s; {LIMIT}",
}


def unrun(instance):
    """Return how often ``instance`` was handed back unrun from a dead worker's queue."""
    return LogRecord.objects.filter(
        instance=instance, message__startswith="handed back before it started: its worker died"
    ).count()


def test_exit_causes_read_well():
    assert exit_cause(-11) == "signal SIGSEGV"
    assert exit_cause(3) == "exit code 3"
    assert exit_cause(71) == "the daemon's lease ran out"


@pytest.mark.django_db(transaction=True)
def test_poison_tasks_end_with_their_cause_and_good_tasks_run_once(start_daemon, poison_types):
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    poison, good = {}, []
    for kind in poison_types:
        good.append(atp.enqueue("tests.echo", {"before": kind}))
        poison[kind] = atp.enqueue(f"tests.{kind}", {})
    good += atp.enqueue_many("tests.echo", [{"after": n} for n in range(10)])

    daemon = start_daemon("--burst", "--workers", 2)
    assert daemon.wait(120) == 0, daemon.output()

    for kind, instance in poison.items():
        instance = Instance.objects.get(pk=instance.pk)
        last = LogRecord.objects.filter(instance=instance).last()
        assert instance.status == Status.FAILED, kind
        if kind == "fail":
            assert (instance.attempt - unrun(instance), instance.restarts) == (1, 0)
            assert last.message.rstrip().endswith("ValueError: poison: the handler raised")
        else:
            # A task queued behind one whose worker died comes back unrun: an attempt
            # spent, no restart.
            assert (instance.attempt, instance.restarts) == (
                2 + unrun(instance), 1), kind
            assert last.message == EXPECTED_END[kind], kind
    for instance in Instance.objects.filter(pk__in=[g.pk for g in good]):
        assert (instance.status, instance.attempt - unrun(instance), instance.restarts) == (
            Status.FINISHED, 1, 0)
    # One supervisor all along: it registered once and stopped cleanly.
    assert list(Daemon.objects.values_list("pid", flat=True)) == [daemon.pid]


@pytest.mark.django_db(transaction=True)
def test_a_time_out_kills_the_worker_within_timeout_grace_and_a_tick(start_daemon, poison_types):
    spinning = atp.enqueue("tests.ignore_sigterm")
    daemon = start_daemon("--burst", "--workers", 1)
    assert daemon.wait(60) == 0, daemon.output()
    history = list(LogRecord.objects.filter(instance=spinning).values_list("status", "time"))
    started = [time for status, time in history if status == Status.RUNNING]
    ended = [time for status, time in history if status in (Status.ACCEPTED, Status.FAILED)][1:]
    assert len(started) == len(ended) == 2
    # timeout 1 s + kill grace 0.5 s + one control tick 0.5 s, with 1 s for the rest.
    for run, end in zip(started, ended, strict=True):
        assert datetime.timedelta(seconds=1) < end - run < datetime.timedelta(seconds=3)


@pytest.mark.django_db(transaction=True)
def test_workers_are_recycled_after_n_tasks(start_daemon):
    atp.register_task_type("tests.pid", "tests.handlers.report_pid")
    tasks = atp.enqueue_many("tests.pid", [{}] * 4)
    daemon = start_daemon("--burst", "--workers", 1, "--max-tasks-per-child", 2)
    assert daemon.wait(60) == 0, daemon.output()
    pids = [atp.get_response(task).json()["pid"] for task in tasks]
    assert pids[0] == pids[1] != pids[2] == pids[3]


@pytest.mark.django_db(transaction=True)
def test_workers_are_recycled_above_a_memory_limit(start_daemon):
    atp.register_task_type("tests.hog", "tests.handlers.hog_memory")
    atp.register_task_type("tests.pid", "tests.handlers.report_pid")
    hog = atp.enqueue("tests.hog", {"megabytes": 200}, priority=2)
    lean = atp.enqueue("tests.hog", {"megabytes": 1}, priority=1)
    after = atp.enqueue("tests.pid")
    daemon = start_daemon("--burst", "--workers", 1, "--max-memory-per-child", 150)
    assert daemon.wait(60) == 0, daemon.output()
    first, second, third = (atp.get_response(t).json()["pid"] for t in (hog, lean, after))
    assert first != second == third
    assert Instance.objects.get(pk=hog.pk).status == Status.FINISHED
