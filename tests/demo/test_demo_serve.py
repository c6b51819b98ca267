import os
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

import atp
from atp.models import Daemon, Instance
from atp.states import Status
from atp_demo.login import ensure_login
from tests.processes import PROJECT_ROOT, environment, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def answers(url):
    try:
        return urllib.request.urlopen(url, timeout=2).status == 200
    except OSError:
        return False


def test_the_demo_serves_pages_runs_tasks_and_stops_both_on_ctrl_c(tmp_path):
    password, _ = ensure_login("demo")
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    task = atp.enqueue("tests.echo", {"demo": True})
    port = free_port()
    log = open(tmp_path / "demo.log", "w")
    demo = subprocess.Popen(
        [sys.executable, "manage.py", "demo_serve", f"127.0.0.1:{port}"],
        cwd=PROJECT_ROOT, env=environment(), stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, as a terminal would give it
    )
    def serving():
        if demo.poll() is not None:
            raise AssertionError(f"the demo exited:\n{(tmp_path / 'demo.log').read_text()}")
        return answers(f"http://127.0.0.1:{port}/admin/login/")

    try:
        wait_until(serving, timeout=60, message="the web server answering")
        said = lambda: (tmp_path / "demo.log").read_text()  # noqa: E731
        wait_until(lambda: "  login " in said(), timeout=30, message="the demo saying it is up")
        for line in (f"start page   http://127.0.0.1:{port}/\n", f"dashboard    http://127.0.0.1:{port}/atp/\n",
                     f"admin        http://127.0.0.1:{port}/admin/\n", f"login        'demo', password '{password}'"):
            assert line in said()
        wait_until(lambda: Instance.objects.get(pk=task.pk).status == Status.FINISHED,
                   timeout=60, message="the demo's daemon running a task")
        os.killpg(demo.pid, signal.SIGINT)  # Ctrl-C
        assert demo.wait(30) == 0, (tmp_path / "demo.log").read_text()
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
    [daemon] = Daemon.objects.all()
    assert daemon.stopped is not None
