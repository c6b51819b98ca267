"""Periodic tasks with real daemons: each due time enqueued once, on time, by one of them."""

import datetime

import pytest

import atp
from atp import engine
from atp.models import Daemon, Instance, LogRecord
from atp.schedules import run_identifier
from atp.states import Status
from tests.processes import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_two_daemons_enqueue_a_one_second_schedule_once_per_due_time_on_time(start_daemon):
    atp.register_task_type("tests.noop", "tests.handlers.noop")
    daemons = [start_daemon("--workers", "1"), start_daemon("--workers", "1")]
    wait_until(lambda: Daemon.objects.filter(stopped__isnull=True).count() == 2, 30,
               message="both daemons started", output=daemons[0].output)
    schedule = atp.schedule("beat", "tests.noop", every=1)
    first = schedule.next_run
    wait_until(lambda: Instance.objects.filter(status=Status.FINISHED).count() >= 4, 30,
               message="four runs finished", output=daemons[1].output)
    engine.set_schedule_enabled("beat", False)

    tasks = list(Instance.objects.order_by("identifier").values_list("identifier", "created"))
    count = len(tasks)
    assert [name for name, _ in tasks] == [
        run_identifier("beat", first + datetime.timedelta(seconds=k)) for k in range(count)]
    # The first run is found at a poll (every second); a daemon then knows when the
    # next one is due, and looks at that moment.
    for k, (_, created) in enumerate(tasks):
        late = created - (first + datetime.timedelta(seconds=k))
        most = datetime.timedelta(seconds=1.2 if k == 0 else 0.5)
        assert datetime.timedelta(0) <= late < most, (k, late)
    by = set(LogRecord.objects.filter(status=None, message__startswith="enqueued by schedule")
             .values_list("instance_id", flat=True))
    assert len(by) == count
