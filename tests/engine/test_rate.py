"""A type's ``rate`` and ``bucket_size``: App Engine's token bucket, enforced by the claim.

Time is controlled by moving the bucket's ``tokens_at`` into the past (as if the last
claim were that long ago): no test sleeps while a bucket refills.
"""

import datetime

import pytest

import atp
from atp import engine
from atp.db import database_now
from atp.engine.base import database
from atp.exceptions import InvalidParameter
from atp.models import Task, Type
from atp.rates import format_rate, parse_rate, tokens_now
from tests.interleave import interleave

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("given", "per_second", "shown"), [
    ("5/s", 5.0, "5/s"), ("20/m", 20 / 60, "20/m"), ("100/h", 100 / 3600, "100/h"),
    ("1/d", 1 / 86400, "1/d"), (" 2.5 / s ", 2.5, "150/m"), (0.5, 0.5, "30/m"), (3, 3.0, "3/s"),
])
def test_rates_are_read_as_app_engine_writes_them(given, per_second, shown):
    assert parse_rate("rate", given) == pytest.approx(per_second)
    assert format_rate(parse_rate("rate", given)) == shown


@pytest.mark.parametrize("bad", ["5", "5/x", "0/s", "-1/s", "", 0, -2, True, float("inf"),
                                 float("nan"), [5], 2_000_000])
def test_a_bad_rate_is_refused(db, bad):
    with pytest.raises(InvalidParameter, match="rate must be"):
        atp.register_task_type("tests.rated", "tests.handlers.noop", rate=bad)
    assert not Type.objects.filter(identifier="tests.rated").exists()


def test_the_bucket_refills_at_the_rate_up_to_its_size():
    then = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    later = then + datetime.timedelta(seconds=2)
    assert tokens_now(1.5, 10, 0.5, then, later) == 3.5
    assert tokens_now(1.5, 3, 0.5, then, later) == 3  # never above its size
    assert tokens_now(1.5, None, None, None, later) == 5  # full at first; 5 by default
    assert tokens_now(1.5, 10, 2.0, later, then) == 2.0  # a clock behind adds nothing


def rated(identifier="tests.rated", **parameters):
    return atp.register_task_type(identifier, "tests.handlers.noop", **parameters)


def set_bucket(task_type, tokens, seconds_ago):
    """Leave ``task_type``'s bucket as a claim ``seconds_ago`` seconds ago left it."""
    moment = database_now(database()) - datetime.timedelta(seconds=seconds_ago)
    Type.objects.filter(pk=task_type.pk).update(tokens=tokens, tokens_at=moment)


def tokens_of(task_type):
    return Type.objects.values_list("tokens", flat=True).get(pk=task_type.pk)


def test_a_full_bucket_starts_bucket_size_tasks_at_once_then_none(daemon):
    rated(rate="1/m", bucket_size=3)
    atp.enqueue_many("tests.rated", [{}] * 10)
    assert len(atp.dequeue(daemon, limit=10)) == 3
    assert atp.dequeue(daemon, limit=10) == []
    assert tokens_of(atp.get_type("tests.rated")) == pytest.approx(0, abs=0.01)


def test_the_claim_takes_the_tokens_that_came_since_the_last(daemon):
    task_type = rated(rate="2/s", bucket_size=10)
    atp.enqueue_many("tests.rated", [{}] * 20)
    set_bucket(task_type, 0.25, seconds_ago=2)  # 0.25 + 2 s * 2/s = 4.25 tokens
    assert len(atp.dequeue(daemon, limit=20)) == 4
    assert tokens_of(task_type) == pytest.approx(0.25, abs=0.1)
    set_bucket(task_type, 0, seconds_ago=3600)  # a quiet hour fills only the bucket
    assert len(atp.dequeue(daemon, limit=20)) == 10


def test_a_claim_takes_no_more_tokens_than_tasks_it_claims(daemon):
    task_type = rated(rate="1/m", bucket_size=5)
    atp.enqueue_many("tests.rated", [{}] * 2)
    assert len(atp.dequeue(daemon, limit=10)) == 2
    assert tokens_of(task_type) == pytest.approx(3, abs=0.01)


def test_daemons_share_one_bucket(db):
    rated(rate="1/m", bucket_size=4)
    atp.enqueue_many("tests.rated", [{}] * 10)
    first, second = engine.register_daemon(), engine.register_daemon()
    taken = [len(atp.dequeue(daemon, limit=3)) for daemon in (first, second, first, second)]
    assert taken == [3, 1, 0, 0]


def test_a_type_out_of_tokens_does_not_hold_back_other_types(daemon):
    task_type = rated(rate="1/m", bucket_size=1, max_concurrency=5)
    atp.register_task_type("tests.free", "tests.handlers.noop")
    atp.register_task_type("tests.limited", "tests.handlers.noop", max_concurrency=2)
    set_bucket(task_type, 0, seconds_ago=0)
    atp.enqueue_many("tests.rated", [{}] * 3, priority=10)
    free = atp.enqueue_many("tests.free", [{}] * 2)
    limited = atp.enqueue_many("tests.limited", [{}] * 3)
    claimed = {task.pk for task in atp.dequeue(daemon, limit=10)}
    assert claimed == {task.pk for task in free + limited[:2]}


def test_both_a_rate_and_a_concurrency_limit_hold(daemon):
    rated(rate="1/m", bucket_size=5, max_concurrency=2)
    atp.enqueue_many("tests.rated", [{}] * 10)
    assert len(atp.dequeue(daemon, limit=10)) == 2  # the concurrency limit first
    task_type = atp.get_type("tests.rated")
    assert tokens_of(task_type) == pytest.approx(3, abs=0.01)


def test_the_daemons_claim_takes_tokens_too(daemon):
    task_type = rated(rate="1/m", bucket_size=2)
    atp.enqueue_many("tests.rated", [{}] * 5)
    claimed = engine.claim_for_daemon(daemon, 5, [task_type.pk], start=1, limited=True)
    assert len(claimed) == 2
    # A daemon that has not seen the rate yet (its catalog is older) is held to it too.
    set_bucket(task_type, 1, seconds_ago=0)
    assert len(engine.claim_for_daemon(daemon, 5, [task_type.pk], start=1)) == 1
    assert engine.claim_for_daemon(daemon, 5, [task_type.pk], start=1) == []


def test_changing_the_rate_keeps_the_tokens_held_and_grants_no_burst(daemon):
    """A review found a change of rate refilling the bucket: lowering 100/s to 1/s let a
    whole bucket start at once."""
    task_type = rated(rate="1/m", bucket_size=2)
    atp.enqueue_many("tests.rated", [{}] * 20)
    assert len(atp.dequeue(daemon, limit=20)) == 2
    rated(rate="1/m", bucket_size=2)  # as a daemon's start writes its declarations again
    assert atp.dequeue(daemon, limit=20) == []
    engine.update_task_type("tests.rated", bucket_size=3, rate="2/m")
    assert atp.dequeue(daemon, limit=20) == []  # still empty: no burst for the change
    set_bucket(task_type, 2.5, seconds_ago=0)
    engine.update_task_type("tests.rated", bucket_size=1)
    assert tokens_of(task_type) == pytest.approx(1, abs=0.01)  # at most the new size
    engine.update_task_type("tests.rated", rate=None, bucket_size=None)
    assert len(atp.dequeue(daemon, limit=20)) == 18  # no rate: the rest
    assert Type.objects.filter(pk=task_type.pk, tokens=None, tokens_at=None).exists()
    engine.update_task_type("tests.rated", rate="1/m")  # a new rate: a full bucket
    assert Type.objects.filter(pk=task_type.pk, tokens=None).exists()


def test_a_claim_that_took_none_leaves_the_bucket_as_it_was(daemon):
    task_type = rated(rate="1/s", bucket_size=5)
    atp.dequeue(daemon, limit=5)  # nothing waits
    assert Type.objects.filter(pk=task_type.pk, tokens=None, tokens_at=None).exists()
    set_bucket(task_type, 0.5, seconds_ago=0)
    before = Type.objects.values_list("tokens", "tokens_at").get(pk=task_type.pk)
    atp.enqueue("tests.rated")
    assert atp.dequeue(daemon, limit=5) == []  # half a token
    assert Type.objects.values_list("tokens", "tokens_at").get(pk=task_type.pk) == before


def test_a_bucket_size_needs_a_rate(db):
    with pytest.raises(InvalidParameter, match="bucket_size needs a rate"):
        rated(bucket_size=3)
    assert not Type.objects.filter(identifier="tests.rated").exists()
    rated(rate="5/s", bucket_size=2)
    with pytest.raises(InvalidParameter, match="bucket_size needs a rate"):
        engine.update_task_type("tests.rated", rate=None)  # the stored size counts
    rated(bucket_size=7)  # the stored rate counts
    assert Type.objects.get(identifier="tests.rated").bucket_size == 7


@pytest.mark.django_db(transaction=True)
def test_two_claims_racing_for_the_last_token_take_it_once():
    """The second claim waits for the first's lock of the type, then reads the bucket as
    the first left it: not as it was when its own statement began."""
    task_type = rated(rate="1/m", bucket_size=1)
    queued = atp.enqueue_many("tests.rated", [{}] * 2)
    first_daemon, second_daemon = engine.register_daemon(), engine.register_daemon()

    def claim(daemon):
        return engine.claim_for_daemon(daemon, 2, [task_type.pk], start=1, limited=True)

    first, second = interleave(lambda: claim(first_daemon), lambda: claim(second_daemon),
                               pause_after=r"(?s)quota AS|^(?!.*kinds AS).*atp_logrecord")
    claimed = [task.pk for task in first.get() + second.get()]
    assert claimed == [queued[0].pk], "the bucket's last token was taken twice"
    assert Task.objects.filter(daemon__isnull=False).count() == 1
    assert tokens_of(task_type) == pytest.approx(0, abs=0.01)


def test_an_idle_daemon_learns_when_the_next_token_comes(daemon):
    task_type = rated(rate="2/s", bucket_size=2)
    assert engine.next_due([task_type.pk], 5, rates=True) is None  # nothing waits
    atp.enqueue_many("tests.rated", [{}] * 3)
    set_bucket(task_type, 0.5, seconds_ago=0)  # half a token: the next in 0.25 s
    due = engine.next_due([task_type.pk], 5, rates=True)
    assert 0.1 < due <= 0.25
    assert engine.next_due([task_type.pk], 5) is None  # without rates: only delayed tasks
    assert engine.next_due([task_type.pk], 0.1, rates=True) is None  # not before the poll
    set_bucket(task_type, 1.5, seconds_ago=0)  # a token now: the claim takes it
    assert engine.next_due([task_type.pk], 5, rates=True) is None


def test_a_token_that_came_while_the_daemon_was_slow_to_ask_is_due_at_once(daemon):
    # The claim found the bucket empty 0.6 s ago; the daemon, slow under load, asks only
    # now, when the token it waits for has come: the claim is due now, not at the poll.
    task_type = rated(rate="2/s", bucket_size=1)
    atp.enqueue_many("tests.rated", [{}] * 3)
    set_bucket(task_type, 0, seconds_ago=0.6)
    assert engine.next_due([task_type.pk], 5, rates=True, claimed_ago=0.6) == 0
    set_bucket(task_type, 0, seconds_ago=0.2)  # the token comes 0.3 s after the claim
    assert 0.2 < engine.next_due([task_type.pk], 5, rates=True, claimed_ago=0.2) <= 0.3
    # A bucket that held a token at the claim did not hold the claim back (a concurrency
    # limit did): no token is waited for, and the daemon does not claim again and again.
    set_bucket(task_type, 1, seconds_ago=0.6)
    assert engine.next_due([task_type.pk], 5, rates=True, claimed_ago=0.6) is None
