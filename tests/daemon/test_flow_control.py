"""Flow control with real daemons: a type's rate and concurrency limit hold for all of
them together, read back from the state history."""

import datetime
import itertools

import pytest

import atp
from atp.models import Instance, LogRecord
from atp.states import TERMINAL, Status
from tests.processes import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

#: History times are the database's clock at each statement's start: a claim that
#: waited for a rival's lock can be dated a little before the rival's statement that
#: freed its slot. Starts are read this much later; a real excess lasts a whole task.
CLOCK_TOLERANCE = datetime.timedelta(milliseconds=20)


def in_flight_at_most(type_identifier):
    """Return the most tasks of the type leased at once, from its history: from each
    SCHEDULED entry (the claim) to the entry that ended that attempt."""
    events, claimed = [], {}
    for pk, status, time in LogRecord.objects.filter(
            instance__type__identifier=type_identifier).exclude(status="").order_by(
            "time", "pk").values_list("instance_id", "status", "time"):
        if status == Status.SCHEDULED:
            claimed[pk] = time
        elif (status in TERMINAL or status == Status.ACCEPTED) and pk in claimed:
            events += [(claimed.pop(pk) + CLOCK_TOLERANCE, 1), (time, -1)]
    assert not claimed, "tasks still leased"
    running = most = 0
    for _, step in sorted(events):  # at equal times an end comes first
        running += step
        most = max(most, running)
    return most


def test_max_concurrency_2_holds_across_three_daemons(start_daemon):
    atp.register_task_type("tests.pair", "tests.handlers.sleep", max_concurrency=2)
    tasks = atp.enqueue_many("tests.pair", [{"seconds": 0.2}] * 40)
    # One task at a time each: without the limit the three would run three at once.
    daemons = [start_daemon("--workers", 1, "--prefetch", 0) for _ in range(3)]
    ended = Instance.objects.filter(pk__in=[task.pk for task in tasks], status__in=TERMINAL)
    wait_until(lambda: ended.count() == len(tasks), timeout=120, message="all tasks ended",
               output=daemons[0].output)
    for daemon in daemons:
        daemon.stop()
    assert set(ended.values_list("status", flat=True)) == {Status.FINISHED}
    assert in_flight_at_most("tests.pair") == 2
    # A daemon that ends a task claims the freed slot in the same statement: the first
    # two daemons to claim keep the two slots (the third polls in vain).
    assert runs_by_daemon() >= 2


def runs_by_daemon(**window):
    """Return how many daemons claimed tasks (within ``window``: a filter of the times)."""
    claims = LogRecord.objects.filter(status=Status.SCHEDULED, **window)
    return len(set(claims.values_list("daemon", flat=True)))


def test_a_rate_of_10_per_second_admits_100_starts_in_10_seconds_across_three_daemons(
        start_daemon):
    atp.register_task_type("tests.rated", "tests.handlers.noop", rate="10/s", bucket_size=5)
    atp.enqueue_many("tests.rated", [{}] * 300)
    daemons = [start_daemon("--workers", 2) for _ in range(3)]
    claims = LogRecord.objects.filter(status=Status.SCHEDULED)
    wait_until(claims.exists, timeout=60, message="a first start", output=daemons[0].output)
    first = claims.order_by("time").values_list("time", flat=True).first()
    window = datetime.timedelta(seconds=10)
    wait_until(lambda: claims.filter(time__gt=first + window).exists(), timeout=60,
               message="a start after 10 s", output=daemons[0].output)
    for daemon in daemons:
        daemon.stop()
    started = claims.filter(time__lte=first + window).count()
    # A full bucket's 5 at once, then 10 a second: 105 at most.
    assert 90 <= started <= 110, f"{started} starts in 10 s"
    assert runs_by_daemon(time__lte=first + window) == 3, "not all three daemons took part"


def test_an_idle_daemon_claims_when_the_next_token_comes_not_at_its_next_poll(start_daemon):
    atp.register_task_type("tests.rated", "tests.handlers.noop", rate="2/s", bucket_size=1)
    tasks = atp.enqueue_many("tests.rated", [{}] * 4)
    daemon = start_daemon("--workers", 2, "--poll-interval", 10)
    ended = Instance.objects.filter(pk__in=[task.pk for task in tasks], status=Status.FINISHED)
    wait_until(lambda: ended.count() == len(tasks), timeout=30, message="all tasks ended",
               output=daemon.output)
    daemon.stop()
    claims = sorted(LogRecord.objects.filter(status=Status.SCHEDULED).values_list("time", flat=True))
    gaps = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(claims)]
    # One token every 0.5 s; polling every 10 s would space them 10 s apart.
    assert all(0.4 < gap < 1.5 for gap in gaps), gaps
