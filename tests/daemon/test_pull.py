"""A real atpd leaves the tasks of a pull type to their consumers (``atp.lease_tasks``)."""

import pytest

import atp
from atp.models import Instance, LogRecord
from atp.states import Status

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_atpd_burst_runs_its_types_and_leaves_a_pull_types_tasks_alone(start_daemon, noop_type):
    atp.register_pull_type("tests.pull")
    pulled = atp.enqueue_many("tests.pull", [{"n": n} for n in range(3)], tag="t")
    pushed = atp.enqueue_many("tests.noop", [{}] * 3)
    daemon = start_daemon("--burst", "--workers", 1)
    assert daemon.wait(60) == 0, daemon.output()
    assert set(Instance.objects.filter(pk__in=[t.pk for t in pushed])
               .values_list("status", flat=True)) == {Status.FINISHED}
    untouched = Instance.objects.filter(pk__in=[t.pk for t in pulled])
    assert set(untouched.values_list("status", "attempt", "daemon")) == {(Status.ACCEPTED, 0, None)}
    assert LogRecord.objects.filter(instance__in=untouched).count() == 3  # "enqueued" only
    # Skipped without a word: not an unrunnable type.
    assert "tests.pull" not in daemon.output()
    # Its consumers lease them still.
    assert len(atp.lease_tasks("tests.pull", 5, 60, tag="t")) == 3
