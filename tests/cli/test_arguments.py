import argparse
import datetime

import pytest

from atp.cli import arguments


@pytest.mark.parametrize("text, seconds", [
    ("0", 0), ("90", 90), ("2.5", 2.5), ("90s", 90), ("15m", 900), ("2h", 7200),
    ("7d", 7 * 86400), ("1w", 7 * 86400), ("1h30m", 5400), ("1H30M", 5400), ("0.5h", 1800),
    ("01:30:00", 5400), ("3 days, 10:00:00", 3 * 86400 + 36000), ("P7D", 7 * 86400),
    ("pt15m", 900),
])
def test_durations_read_as_operators_write_them(text, seconds):
    assert arguments.duration(text) == datetime.timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "soon", "3x", "-5m", "-1", "1h-", "h", "1e400",
                                  "99999999d", "nan", "1.5.2h"])
def test_what_is_not_a_duration_is_refused_saying_what_is(text):
    with pytest.raises(argparse.ArgumentTypeError, match="must be a duration of at most"):
        arguments.duration(text)


@pytest.mark.parametrize("text", ["abc", "0", "-3", "1.5", "²", "1" * 19, ""])
def test_a_task_number_is_digits_that_fit_the_column(text):
    with pytest.raises(argparse.ArgumentTypeError, match="is not a task number"):
        arguments.task_id(text)
    assert arguments.task_id("42") == 42


@pytest.mark.parametrize("text", ["nan", "-1", "inf-", "x", "-0.1"])
def test_a_countdown_is_a_non_negative_number(text):
    with pytest.raises(argparse.ArgumentTypeError, match="must be a non-negative number"):
        arguments.non_negative_float(text)
    assert arguments.non_negative_float("0") == 0


def test_inputs_are_json():
    assert arguments.json_value('{"a": [1, null]}') == {"a": [1, None]}
    with pytest.raises(argparse.ArgumentTypeError, match="is not JSON"):
        arguments.json_value("{'a': 1}")
