"""The retry policy's arithmetic, against App Engine's documented sequences."""

import datetime

import pytest

from atp.retry import RetryPolicy

S = datetime.timedelta(seconds=1)


@pytest.mark.parametrize("least, most, doublings, waits", [
    (10, 300, 3, [10, 20, 40, 80, 160, 240, 300, 300]),
    (10, 200, 0, [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160,
                  170, 180, 190, 200, 200, 200]),
    (1, 1000, 16, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000, 1000]),
    (0.5, 3, 1, [0.5, 1, 2, 3, 3]),
])
def test_the_waits_double_then_grow_linearly_then_stop_at_the_maximum(least, most, doublings,
                                                                      waits):
    policy = RetryPolicy(retry_limit=100, min_backoff=least * S, max_backoff=most * S,
                         max_doublings=doublings)
    assert [policy.backoff(n).total_seconds() for n in range(1, len(waits) + 1)] == waits


def test_a_huge_retry_number_stays_at_the_maximum():
    policy = RetryPolicy(retry_limit=10**9, min_backoff=S, max_backoff=60 * S)
    assert policy.backoff(10**9) == 60 * S


def test_jitter_draws_between_half_and_all_of_the_wait():
    policy = RetryPolicy(retry_limit=5, min_backoff=10 * S, max_backoff=300 * S,
                         max_doublings=3, jitter=True)
    assert policy.backoff(2, rand=lambda: 0.0) == 10 * S
    assert policy.backoff(2, rand=lambda: 1.0) == 20 * S
    assert policy.backoff(2, rand=lambda: 0.5) == 15 * S


def test_retries_are_numbered_from_one():
    with pytest.raises(ValueError, match="numbered from 1"):
        RetryPolicy(retry_limit=1).backoff(0)


# (retry_limit, age_limit s, retries done, age s, retried?)
LIMITS = [
    (None, None, 0, 0, False),  # the default: no retry
    (0, None, 0, 0, False),
    (3, None, 2, 10_000, True),
    (3, None, 3, 0, False),
    (None, 60, 100, 59, True),
    (None, 60, 0, 60, False),
    # Both: retried until both are reached.
    (3, 60, 3, 10, True),    # count reached, age not
    (3, 60, 1, 100, True),   # age reached, count not
    (3, 60, 3, 60, False),   # both reached
    (3, 60, 5, 61, False),
]


@pytest.mark.parametrize("retry_limit, age_limit, done, age, retried", LIMITS)
def test_the_limits(retry_limit, age_limit, done, age, retried):
    policy = RetryPolicy(retry_limit=retry_limit,
                         age_limit=None if age_limit is None else age_limit * S)
    assert policy.allows(done, age * S) is retried
    assert policy.retries is (retry_limit is not None or age_limit is not None)
