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


class _ThreadThatEnds:
    """A thread of the forked process that ends, at a chosen moment, while its
    ``children`` file is about to be read (an at-fork hook's thread does: OpenTelemetry's
    batch processors start one in every fork, which ends at once when it was shut down)."""

    def __init__(self, start_child=False):
        self.child = None
        self.tid = None
        started, self._end = threading.Event(), threading.Event()

        def run():
            self.tid = threading.get_native_id()
            if start_child:  # its parent is this thread until it ends
                self.child = subprocess.Popen(["sleep", "30"])
            started.set()
            self._end.wait()

        self._thread = threading.Thread(target=run)
        self._thread.start()
        started.wait()

    def end(self):
        self._end.set()
        self._thread.join()
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/self/task/{self.tid}") and time.monotonic() < deadline:
            time.sleep(0.001)  # until the kernel has let the thread go


def _listing_main_thread_first():
    """The threads' listing with this (the main) thread first, as the kernel lists them."""
    tids = os.listdir("/proc/self/task")
    main = str(threading.get_native_id())
    return [main] + [tid for tid in tids if tid != main]


def test_a_thread_that_ends_before_its_file_is_read_is_no_child(monkeypatch):
    def check():
        ending = _ThreadThatEnds()
        listing = _listing_main_thread_first()
        ending.end()  # it ends after the listing, before its file is opened
        real = os.listdir
        listings = iter([listing])
        monkeypatch.setattr(os, "listdir", lambda path: next(listings, None) or real(path))
        return not worker._has_children_in_proc()

    assert _in_a_child_process(check) == 0


def test_the_child_of_a_thread_that_ends_after_a_sibling_was_read_is_seen(monkeypatch):
    """The kernel gives an ending thread's children to a live thread of the process: here
    the main thread, whose file was read before; the scan must not miss them."""

    def check():
        ending = _ThreadThatEnds(start_child=True)
        real_open = os.open

        def open_ending_after_its_sibling(path, flags):
            if path == f"/proc/self/task/{ending.tid}/children":
                ending.end()
            return real_open(path, flags)

        real = os.listdir
        listings = iter([_listing_main_thread_first()])
        monkeypatch.setattr(os, "listdir", lambda path: next(listings, None) or real(path))
        monkeypatch.setattr(os, "open", open_ending_after_its_sibling)
        try:
            return worker._has_children_in_proc()
        finally:
            ending.child.kill()
            ending.child.wait()

    assert _in_a_child_process(check) == 0
