"""``atpd --reload``: a real parent and its daemon, and a handler module the test edits."""

import signal

import pytest

import atp
from atp.daemon import reload
from atp.models import Daemon, Instance
from atp.states import Status
from tests.processes import wait_until

VERSION_1 = '''
def work(task, inputs):
    return "version 1"
'''
VERSION_2 = '''
def work(task, inputs):
    return "version 2, with a new handler"


def added(task, inputs):
    return "added while atpd ran"
'''
BROKEN = '''
def work(task, inputs)
    return "a colon is missing"
'''


def status_of(task):
    return Instance.objects.get(pk=task.pk).status


def run_until(daemon, task):
    wait_until(lambda: status_of(task) == Status.FINISHED, timeout=60,
               message=f"task {task.pk} finished", output=daemon.output)
    return atp.get_response(task).text


@pytest.mark.once
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_atpd_reload_restarts_the_daemon_when_its_code_changes(start_daemon, handler_module):
    module = handler_module(VERSION_1)
    atp.register_task_type("tests.work", f"{module}.work")
    daemon = start_daemon("--reload", "--workers", 1, "--shutdown-timeout", 5,
                          **handler_module.daemon_settings())
    assert run_until(daemon, atp.enqueue("tests.work")) == "version 1"

    handler_module(VERSION_2)
    wait_until(lambda: "code changed" in daemon.output(), timeout=30,
               message="the change seen", output=daemon.output)
    atp.register_task_type("tests.added", f"{module}.added")
    after, added = atp.enqueue("tests.work"), atp.enqueue("tests.added")
    assert run_until(daemon, added) == "added while atpd ran"
    assert atp.get_response(after).text == "version 2, with a new handler"
    # Restarted gracefully: the old daemon retired, nothing was restarted.
    assert Daemon.objects.filter(stopped__isnull=True).count() == 1
    assert Instance.objects.filter(restarts__gt=0).count() == 0
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0, daemon.output()


@pytest.mark.once
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_atpd_reload_outlives_a_syntax_error_and_runs_the_fixed_code(start_daemon, handler_module):
    module = handler_module(VERSION_1)
    atp.register_task_type("tests.work", f"{module}.work")
    daemon = start_daemon("--reload", "--workers", 1, "--shutdown-timeout", 5,
                          **handler_module.daemon_settings())
    assert run_until(daemon, atp.enqueue("tests.work")) == "version 1"

    handler_module(BROKEN, load=False)
    wait_until(lambda: "when the code changes" in daemon.output()
               or daemon.process.poll() is not None,
               timeout=60, message="the new daemon failed", output=daemon.output)
    assert daemon.process.poll() is None, f"atpd --reload exited:\n{daemon.output()}"
    said = daemon.output()
    assert "SyntaxError" in said and f"{module}.py" in said and "def work(task, inputs)" in said

    handler_module(VERSION_2)
    atp.register_task_type("tests.added", f"{module}.added")
    assert run_until(daemon, atp.enqueue("tests.added")) == "added while atpd ran"
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0, daemon.output()


class FakeClock:
    """Time that passes only when slept (the watcher's ``time``)."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class ChildRunning:
    """A daemon process that exits after ``seconds`` of the fake clock."""

    def __init__(self, clock, seconds):
        self.clock, self.seconds, self.returncode = clock, seconds, None

    def poll(self):
        if self.clock.now >= self.seconds:
            self.returncode = 0
        return self.returncode


def test_the_watcher_reads_the_tree_once_a_second(monkeypatch):
    # A fake clock and child: how often is counted, and real sleeps would only blur it.
    clock = FakeClock()
    reads = []
    monkeypatch.setattr(reload, "time", clock)
    monkeypatch.setattr(reload, "code_snapshot", lambda: reads.append(clock.now) or {})
    assert reload._watch(ChildRunning(clock, 10.0), {}, []) is None
    assert 9 <= len(reads) <= 10, reads
