import datetime

import pytest

import atp
from atp.daemon.pool import exit_cause
from atp.models import Daemon, Instance, LogRecord
from atp.states import Status
from tests.processes import wait_until

pytestmark = pytest.mark.slow

LIMIT = "restart limit reached (1 restarts)"
EXPECTED_END = {
    "hard_exit_0": f"worker died: exit code 0; {LIMIT}",
    "abort": f"worker died: signal SIGABRT; {LIMIT}",
    "segfault": f"worker died: signal SIGSEGV; {LIMIT}",
    "killed": f"worker died: signal SIGKILL; {LIMIT}",
    "spin": f"time-out after 1 s; {LIMIT}",
    "ignore_sigterm": f"time-out after 1 s; {LIMIT}",
}

#: Handlers that raise rather than kill their worker, and their traceback's last line.
FAILURES = {"fail": "ValueError: poison: the handler raised", "exit_3": "SystemExit: 3"}


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
        if kind in FAILURES:
            # The handler raised (sys.exit() raises SystemExit): one failed attempt.
            assert (instance.attempt - unrun(instance), instance.restarts) == (1, 0), kind
            assert last.message.rstrip().endswith(FAILURES[kind]), kind
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
def test_a_base_exception_a_handler_raises_fails_its_attempt_and_the_worker_lives_on(start_daemon):
    # SystemExit and KeyboardInterrupt are the handler's own: only a real death (os._exit,
    # a signal, the OOM killer) costs a restart. One retry by the type's policy.
    atp.register_task_type("tests.base", "tests.handlers.raise_base_exception", retry_limit=1,
                           min_backoff=0.1)
    atp.register_task_type("tests.pid", "tests.handlers.report_pid")
    before = atp.enqueue("tests.pid", priority=1)
    raised = {kind: atp.enqueue("tests.base", {"kind": kind})
              for kind in ("SystemExit", "KeyboardInterrupt")}
    after = atp.enqueue("tests.pid", priority=-1)
    daemon = start_daemon("--workers", 1)
    ended = [before, after, *raised.values()]
    wait_until(lambda: all(Instance.objects.get(pk=t.pk).is_terminal for t in ended), 60,
               message="every task ended", output=daemon.output)
    for kind, task in raised.items():
        instance = Instance.objects.get(pk=task.pk)
        assert (instance.status, instance.attempt, instance.retries, instance.restarts) == (
            Status.FAILED, 2, 1, 0), kind
        failures = [message for status, message in LogRecord.objects.filter(
            instance=task, status__in=(Status.ACCEPTED, Status.FAILED)).values_list(
            "status", "message")][1:]
        last_line = "SystemExit: 3" if kind == "SystemExit" else kind
        assert len(failures) == 2 and all(f"\n{last_line}\n" in m for m in failures), failures
    assert atp.get_response(before).json() == atp.get_response(after).json(), \
        "the worker was replaced"
    assert "died" not in daemon.output()


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
