"""A worker asks, after each attempt, whether the attempt left a process behind.

It asks the kernel cheaply (``atp.daemon.worker._has_children``) before it walks its
descendants: every task runs this, so it must be right both ways, in a real process.
"""

import os
import subprocess
import threading
import time

import pytest

from atp.daemon import worker


@pytest.fixture(params=["waitid", "proc"])
def ask(request):
    """Each way the worker asks: ``waitid``, and the children files where it has none."""
    return worker._has_children if request.param == "waitid" else worker._has_children_in_proc


def _in_a_child_process(check):
    """Run ``check`` in a fresh fork (this test process may have children of its own);
    return its exit status: 0 when it returned True."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os._exit(0 if check() else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_process_without_children_has_none(ask):
    assert _in_a_child_process(lambda: not ask()) == 0


def test_a_running_child_is_seen(ask):
    def check():
        child = subprocess.Popen(["sleep", "30"])
        try:
            return ask()
        finally:
            child.kill()
            child.wait()

    assert _in_a_child_process(check) == 0


def test_a_child_that_ended_unreaped_is_seen_and_left_to_reap(ask):
    def check():
        child = subprocess.Popen(["true"])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until it is a zombie
            with open(f"/proc/{child.pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.01)
        seen = ask() and ask()  # asking reaps nothing
        os.waitpid(child.pid, 0)
        return seen and not ask()

    assert _in_a_child_process(check) == 0


def test_a_child_another_thread_started_is_seen(ask):
    def check():
        children = []
        thread = threading.Thread(target=lambda: children.append(subprocess.Popen(["sleep", "30"])))
        thread.start()
        thread.join()
        try:
            return ask()
        finally:
            children[0].kill()
            children[0].wait()

    assert _in_a_child_process(check) == 0


def test_an_orphan_adopted_by_the_subreaper_worker_is_seen(ask):
    def check():
        import ctypes

        ctypes.CDLL(None).prctl(worker.PR_SET_CHILD_SUBREAPER, 1)
        # A child that starts a grandchild and exits at once: the grandchild is adopted.
        middle = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!"], stdout=subprocess.PIPE)
        grandchild = int(middle.stdout.readline())
        middle.wait()
        try:
            return ask()
        finally:
            os.kill(grandchild, 9)
            os.waitpid(grandchild, 0)

    assert _in_a_child_process(check) == 0
