"""``make demo``, run as a newcomer runs it, twice and then with DEMO_RESET=1: the same
login each time until the reset, and no task added by running it again."""

import http.cookiejar
import os
import re
import signal
import sqlite3
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.demo.test_demo_serve import free_port
from tests.processes import PROJECT_ROOT, wait_until

pytestmark = pytest.mark.slow

VENV = Path(sys.executable).parent.parent


def test_make_demo_installs_the_package_without_the_test_tools():
    plan = subprocess.run(["make", "-n", "-B", f"{VENV}/.demo", f"VENV={VENV}"], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, check=True).stdout
    assert re.search(r"pip install --quiet -e \.$", plan, re.M), plan
    assert "[dev]" not in plan


class Demo:
    """One ``make demo`` on its own database and login file, until ``stop``."""

    def __init__(self, directory, *make_args):
        self.port = free_port()
        self.log_path = directory / f"make-demo-{self.port}.log"
        env = {**os.environ, "ATP_DEMO_DATABASE": str(directory / "demo.sqlite3"),
               "ATP_DEMO_LOGIN_FILE": str(directory / "login")}
        for name in ("DJANGO_SETTINGS_MODULE", "ATP_TEST_DB_NAME"):  # the demo's own settings
            env.pop(name, None)
        with open(self.log_path, "w") as log:
            # -o: the installation is the test's venv, not to be made again.
            self.process = subprocess.Popen(
                ["make", "--no-print-directory", "-o", f"{VENV}/.demo", "demo", f"VENV={VENV}",
                 f"DEMO_ADDRESS=127.0.0.1:{self.port}", *make_args],
                cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        wait_until(lambda: "  login " in self.output() or self.process.poll() is not None,
                   timeout=90, message="the demo saying it is up")
        assert self.process.poll() is None, self.output()
        self.url = f"http://127.0.0.1:{self.port}"
        self.username, self.password = re.search(
            r"login\s+'(\w+)', password '([^']+)'", self.output()).groups()
        self.browser = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def output(self):
        return self.log_path.read_text()

    def post(self, path, form_page=None, **fields):
        """Send the form of ``form_page`` (default: ``path``) to ``path``."""
        form = self.browser.open(f"{self.url}{form_page or path}").read().decode()
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
        data = urllib.parse.urlencode({"csrfmiddlewaretoken": csrf, **fields}).encode()
        return self.browser.open(urllib.request.Request(
            f"{self.url}{path}", data=data, headers={"Referer": f"{self.url}{path}"}))

    def log_in(self):
        """Log in with the login it printed; return the start page's HTML."""
        self.post("/admin/login/?next=/", username=self.username, password=self.password)
        page = self.browser.open(f"{self.url}/")
        assert page.url == f"{self.url}/", "the printed login did not work"
        return page.read().decode()

    def stop(self):
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)  # Ctrl-C
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                raise AssertionError(f"make demo did not stop on Ctrl-C:\n{self.output()}") from None


def count_tasks(directory):
    with sqlite3.connect(directory / "demo.sqlite3") as database:
        return database.execute("SELECT COUNT(*) FROM atp_instance").fetchone()[0]


def test_make_demo_twice_keeps_the_login_and_adds_no_task_until_a_reset(tmp_path):
    first = Demo(tmp_path)
    try:
        for address in ("/\n", "/atp/\n", "/admin/\n"):
            assert f"{first.url}{address}" in first.output()
        assert "Start the quilt" in first.log_in()
        first.post("/start/flaky/", form_page="/")
    finally:
        first.stop()
    assert count_tasks(tmp_path) == 1, first.output()

    second = Demo(tmp_path)
    try:
        assert (second.username, second.password) == (first.username, first.password)
        assert "Start the quilt" in second.log_in()
    finally:
        second.stop()
    assert count_tasks(tmp_path) == 1, second.output()

    reset = Demo(tmp_path, "DEMO_RESET=1")
    try:
        assert reset.password != first.password
        assert "Start the quilt" in reset.log_in()
    finally:
        reset.stop()
    assert count_tasks(tmp_path) == 0, reset.output()
