"""What a crash at each point of an attempt costs, with real daemons and real signals
(the table "What a crash costs, point by point" in docs/daemon.md).

The points are reached deterministically, not by timing: the handler waits at a FIFO
until the test opens it, the supervisor is stopped (SIGSTOP) while its worker reports,
and "the worker has sent its end" is read from the kernel: once it has, the worker
waits in ``read`` on its channel to the supervisor again (``/proc/<pid>/syscall``).
"""

import os
import signal
from pathlib import Path

import psutil
import pytest

import atp
from atp.models import Instance, LogRecord
from atp.states import Status
from tests.processes import wait_for_files, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

READ = 0  # the read(2) system call's number on x86-64 and what /proc/<pid>/syscall says


def waiting_in_read(pid):
    """Return the descriptor ``pid``'s main thread waits to read from, or None."""
    try:
        fields = Path(f"/proc/{pid}/syscall").read_text().split()
    except OSError:
        return None
    if len(fields) < 2 or fields[0] != str(READ):
        return None
    return int(fields[1], 16)


class Gate:
    """A one-worker daemon whose task waits at its gate, on its first attempt."""

    def __init__(self, daemon, task, worker, fifo, channel):
        self.daemon, self.task, self.worker = daemon, task, worker
        self.fifo, self.channel = fifo, channel

    def open(self):
        with open(self.fifo, "wb", buffering=0) as gate:
            gate.write(b"x")

    def report_to_a_stopped_supervisor(self):
        """Stop the supervisor, open the gate, and return once the worker has sent its end
        (it waits in read() on its channel again): the end is in the pipe, unread."""
        self.daemon.signal(signal.SIGSTOP)
        self.open()
        wait_until(lambda: waiting_in_read(self.worker) == self.channel, timeout=10,
                   message="the worker sent its end and waits for its next task")


def forked_workers(supervisor):
    """Return the pids of ``supervisor``'s forked workers.

    Not every child is one: importing croniter runs ``file`` (``platform.architecture``)
    while the daemon starts, a child that comes and goes before the workers are forked.
    A forked worker runs the supervisor's own command line.
    """
    pids = []
    for child in supervisor.children():
        try:
            if child.cmdline() == supervisor.cmdline():
                pids.append(child.pid)
        except psutil.NoSuchProcess:
            pass
    return pids


@pytest.fixture
def gated(start_daemon, tmp_path):
    """Start a one-worker daemon and a gated task; return its ``Gate``."""
    if not Path("/proc/self/syscall").exists() or os.uname().machine != "x86_64":
        pytest.skip("needs /proc/<pid>/syscall on x86-64")
    atp.register_task_type("tests.gate", "tests.handlers.gate", max_restarts=3)
    daemon = start_daemon("--workers", 1)
    supervisor = psutil.Process(daemon.pid)
    # Once the same one is seen twice: a child forked to run another program has the
    # supervisor's command line too until it runs it (seen once, gone at the next look).
    seen = []

    def one_worker_twice():
        seen.append(forked_workers(supervisor))
        return len(seen) > 1 and len(seen[-1]) == 1 and seen[-1] == seen[-2]

    wait_until(one_worker_twice, timeout=30, message="worker started", output=daemon.output)
    [worker] = seen[-1]
    # Idle, the worker waits for its next task: in read() on its channel.
    wait_until(lambda: waiting_in_read(worker) is not None, timeout=30,
               message="worker idle", output=daemon.output)
    channel = waiting_in_read(worker)
    fifo, pid_file = tmp_path / "gate", tmp_path / "gate.pid"
    os.mkfifo(fifo)
    task = atp.enqueue("tests.gate", {"fifo": str(fifo), "pid_file": str(pid_file)})
    wait_for_files([pid_file], timeout=30)
    pid, gate_fd = map(int, pid_file.read_text().split())
    assert pid == worker
    wait_until(lambda: waiting_in_read(worker) == gate_fd, timeout=10,
               message="handler waiting at its gate", output=daemon.output)
    return Gate(daemon, task, worker, fifo, channel)


def history(task):
    return list(LogRecord.objects.filter(instance_id=task.pk).exclude(status=None)
                .order_by("id").values_list("status", "attempt"))


def ended(task, daemon, status=Status.FINISHED):
    wait_until(lambda: Instance.objects.get(pk=task.pk).status == status, timeout=30,
               message=f"task {status}", output=daemon.output)
    return Instance.objects.get(pk=task.pk)


RAN_ONCE = [(Status.ACCEPTED, 0), (Status.SCHEDULED, 1), (Status.RUNNING, 1),
            (Status.FINISHED, 1)]
RAN_TWICE = [(Status.ACCEPTED, 0), (Status.SCHEDULED, 1), (Status.RUNNING, 1),
             (Status.ACCEPTED, 1), (Status.SCHEDULED, 2), (Status.RUNNING, 2),
             (Status.FINISHED, 2)]


def test_a_worker_killed_while_its_handler_runs_costs_a_restart(gated):
    os.kill(gated.worker, signal.SIGKILL)
    instance = ended(gated.task, gated.daemon)
    assert (instance.attempt, instance.restarts) == (2, 1)
    assert history(gated.task) == RAN_TWICE


def test_a_worker_killed_after_it_sent_its_end_costs_nothing(gated):
    try:
        gated.report_to_a_stopped_supervisor()
        os.kill(gated.worker, signal.SIGKILL)
    finally:
        gated.daemon.signal(signal.SIGCONT)
    instance = ended(gated.task, gated.daemon)
    assert (instance.attempt, instance.restarts) == (1, 0)
    assert history(gated.task) == RAN_ONCE
    assert atp.get_response(gated.task).json() == {"attempt": 1}


def test_a_supervisor_killed_holding_an_end_not_written_costs_a_restart(gated, start_daemon):
    gated.report_to_a_stopped_supervisor()
    gated.daemon.signal(signal.SIGKILL)  # a stopped process dies of it too
    gated.daemon.wait(10)
    assert Instance.objects.get(pk=gated.task.pk).status == Status.RUNNING
    # The next daemon on this host restarts what a dead one held, at once.
    successor = start_daemon("--workers", 1)
    instance = ended(gated.task, successor)
    assert (instance.attempt, instance.restarts) == (2, 1)
    assert history(gated.task) == RAN_TWICE
    assert atp.get_response(gated.task).json() == {"attempt": 2}


def test_a_supervisor_killed_after_the_end_was_written_costs_nothing(gated, start_daemon):
    gated.open()
    ended(gated.task, gated.daemon)
    gated.daemon.signal(signal.SIGKILL)
    gated.daemon.wait(10)
    successor = start_daemon("--workers", 1)
    wait_until(lambda: "started" in successor.output(), timeout=30, message="successor up")
    instance = Instance.objects.get(pk=gated.task.pk)
    assert (instance.status, instance.attempt, instance.restarts) == (Status.FINISHED, 1, 0)
    assert history(gated.task) == RAN_ONCE
