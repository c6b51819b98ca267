import datetime
import signal

import pytest
from django.db import OperationalError
from django.db.models import F

import atp
from atp import engine, health, stats
from atp.health import check_health
from atp.models import Daemon, Instance
from atp.states import Status
from tests.processes import FAST_TIMERS, wait_until

pytestmark = pytest.mark.django_db


def test_nothing_waiting_and_no_daemon_is_healthy(noop_type):
    report = check_health()
    assert report.is_healthy
    assert report.as_json() == {"status": "ok", "daemons": 0, "runnable": 0,
                                "oldest_wait_seconds": 0.0, "unserved_types": {}}


def test_a_runnable_task_no_live_daemon_runs_is_unhealthy(noop_type):
    atp.enqueue_many("tests.noop", [{}] * 2)
    report = check_health()
    assert not report.is_healthy
    assert report.unserved == {"tests.noop": 2}
    assert report.problems == ("no live daemon runs type 'tests.noop' (2 runnable tasks waiting)",)
    assert report.as_json()["status"] == "unhealthy" and report.runnable == 2


def test_a_live_daemon_that_runs_the_type_makes_it_healthy(noop_type):
    atp.enqueue("tests.noop")
    other = atp.register_task_type("tests.echo", "tests.handlers.echo")
    daemon = engine.register_daemon(workers=2)
    daemon.serves.add(other)
    assert check_health().unserved == {"tests.noop": 1}, "it does not run tests.noop"
    daemon.serves.add(noop_type)
    report = check_health()
    assert report.is_healthy and report.daemons == 1 and report.runnable == 1


def test_a_silent_daemon_serves_nothing(noop_type):
    atp.enqueue("tests.noop")
    daemon = engine.register_daemon(workers=1)
    daemon.serves.add(noop_type)
    Daemon.objects.filter(pk=daemon.pk).update(heartbeat=F("heartbeat") - datetime.timedelta(hours=1))
    assert check_health().unserved == {"tests.noop": 1}


def test_delayed_tasks_paused_types_and_pull_types_need_no_daemon(noop_type):
    atp.enqueue("tests.noop", countdown=600)
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    atp.enqueue("tests.echo")
    atp.pause_type("tests.echo")
    atp.register_pull_type("tests.pull")
    atp.enqueue("tests.pull")
    report = check_health()
    assert report.is_healthy
    assert report.runnable == 0, "an autoscaler must not add daemons for these"


def test_the_oldest_wait_is_measured_on_the_database_clock(noop_type):
    task = atp.enqueue("tests.noop")
    from atp.models import Task

    Task.objects.filter(pk=task.pk).update(not_before=F("not_before") - datetime.timedelta(seconds=90))
    assert 90 <= check_health().oldest_wait_seconds < 900


def test_a_database_that_does_not_answer_is_unhealthy_and_says_no_more(monkeypatch):
    # The test database cannot be stopped under the test: its first query fails instead.
    def unreachable():
        raise OperationalError("connection refused to 10.0.0.7")

    monkeypatch.setattr(stats, "waiting_by_type", unreachable)
    report = health.check_health()
    assert report.as_json() == {"status": "unhealthy", "problems": ["the database does not answer"]}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_killing_the_only_daemon_that_runs_a_waiting_type_makes_it_unhealthy(start_daemon, settings):
    settings.ATP_DAEMON_TIMEOUT_SECONDS = FAST_TIMERS["ATP_DAEMON_TIMEOUT_SECONDS"]
    atp.register_task_type("tests.sleep", "tests.handlers.sleep")
    atp.enqueue_many("tests.sleep", [{"seconds": 600}] * 2)
    assert check_health().unserved == {"tests.sleep": 2}

    daemon = start_daemon("--workers", 1, "--prefetch", 0)
    wait_until(lambda: Instance.objects.filter(status=Status.RUNNING).count() == 1,
               timeout=30, message="one task running", output=daemon.output)
    wait_until(lambda: check_health().is_healthy, timeout=30, message="healthy",
               output=daemon.output)
    # While it lives, the task it has no worker for waits and the probe stays healthy.
    for _ in range(3):
        report = check_health()
        assert report.is_healthy and (report.daemons, report.runnable) == (1, 1)

    daemon.signal(signal.SIGKILL)
    daemon.wait(10)
    wait_until(lambda: not check_health().is_healthy, timeout=30, message="unhealthy")
    report = check_health()
    assert report.unserved == {"tests.sleep": 1} and report.daemons == 0
