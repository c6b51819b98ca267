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


@pytest.fixture
def gated(start_daemon, tmp_path):
    """Start a one-worker daemon and a gated task; return (daemon, task, worker, open_gate,
    channel): the task waits at its gate, on its first attempt."""
    if not Path("/proc/self/syscall").exists() or os.uname().machine != "x86_64":
        pytest.skip("needs /proc/<pid>/syscall on x86-64")
    atp.register_task_type("tests.gate", "tests.handlers.gate", max_restarts=3)
    daemon = start_daemon("--workers", 1)
    supervisor = psutil.Process(daemon.pid)
    wait_until(lambda: supervisor.children(), timeout=30, message="worker started",
               output=daemon.output)
    worker = supervisor.children()[0].pid
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

    def open_gate():
        with open(fifo, "wb", buffering=0) as gate:
            gate.write(b"x")

    return daemon, task, worker, open_gate, channel


def end_sent(worker, channel):
    wait_until(lambda: waiting_in_read(worker) == channel, timeout=10,
               message="the worker sent its end and waits for its next task")


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
    daemon, task, worker, open_gate, channel = gated
    os.kill(worker, signal.SIGKILL)
    instance = ended(task, daemon)
    assert (instance.attempt, instance.restarts) == (2, 1)
    assert history(task) == RAN_TWICE


def test_a_worker_killed_after_it_sent_its_end_costs_nothing(gated):
    daemon, task, worker, open_gate, channel = gated
    daemon.signal(signal.SIGSTOP)
    try:
        open_gate()
        end_sent(worker, channel)
        os.kill(worker, signal.SIGKILL)
    finally:
        daemon.signal(signal.SIGCONT)
    instance = ended(task, daemon)
    assert (instance.attempt, instance.restarts) == (1, 0)
    assert history(task) == RAN_ONCE
    assert atp.get_response(task).json() == {"attempt": 1}


def test_a_supervisor_killed_holding_an_end_not_written_costs_a_restart(gated, start_daemon):
    daemon, task, worker, open_gate, channel = gated
    daemon.signal(signal.SIGSTOP)
    open_gate()
    end_sent(worker, channel)
    daemon.signal(signal.SIGKILL)  # a stopped process dies of it too
    daemon.wait(10)
    assert Instance.objects.get(pk=task.pk).status == Status.RUNNING
    # The next daemon on this host restarts what a dead one held, at once.
    successor = start_daemon("--workers", 1)
    instance = ended(task, successor)
    assert (instance.attempt, instance.restarts) == (2, 1)
    assert history(task) == RAN_TWICE
    assert atp.get_response(task).json() == {"attempt": 2}


def test_a_supervisor_killed_after_the_end_was_written_costs_nothing(gated, start_daemon):
    daemon, task, worker, open_gate, channel = gated
    open_gate()
    ended(task, daemon)
    daemon.signal(signal.SIGKILL)
    daemon.wait(10)
    successor = start_daemon("--workers", 1)
    wait_until(lambda: "started" in successor.output(), timeout=30, message="successor up")
    instance = Instance.objects.get(pk=task.pk)
    assert (instance.status, instance.attempt, instance.restarts) == (Status.FINISHED, 1, 0)
    assert history(task) == RAN_ONCE
