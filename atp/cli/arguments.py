"""Reading the operator's arguments: each parser returns a value or raises
``argparse.ArgumentTypeError`` with the message the operator sees."""

import argparse
import datetime
import json
import re

from django.utils.dateparse import parse_duration

from atp.converters import parse_task_id
from atp.registry import DURATION_MAX


def _number(kind, minimum, *, inclusive):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            value = None
        # NaN compares false to everything, so it would pass the bounds.
        if value is None or value != value or value < minimum or (value == minimum and not inclusive):
            adjective = "non-negative" if inclusive and minimum == 0 else "positive"
            noun = "integer" if kind is int else "number"
            raise argparse.ArgumentTypeError(f"must be a {adjective} {noun}, not {text!r}")
        return value

    return parse


positive_int = _number(int, 0, inclusive=False)
non_negative_int = _number(int, 0, inclusive=True)
positive_float = _number(float, 0, inclusive=False)
non_negative_float = _number(float, 0, inclusive=True)


def type_list(text):
    """``a,b``: one or more task type identifiers."""
    types = [part.strip() for part in text.split(",") if part.strip()]
    if not types:
        raise argparse.ArgumentTypeError("must name at least one task type")
    return types


def task_id(text):
    """A task number: digits that fit the id column."""
    pk = parse_task_id(text)
    if pk is None or pk == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a task number")
    return pk


def integer(text):
    """Any integer (the queue checks its range)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, not {text!r}") from None


def json_value(text):
    """A JSON document, as the task's inputs."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"is not JSON ({exc}): {text!r}") from None


#: ``90s``, ``15m``, ``2h``, ``7d``, ``1w``, and sums of them (``1h30m``); bare
#: numbers are seconds.
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
DURATION_FORMS = "seconds, 90s, 15m, 2h, 7d, 1w, 1h30m, HH:MM:SS or ISO 8601 (P7D)"


def duration(text):
    """A non-negative duration of at most ``DURATION_MAX``; return a timedelta."""
    value = _read_duration(text.strip().lower())
    if value is None or not datetime.timedelta(0) <= value <= DURATION_MAX:
        raise argparse.ArgumentTypeError(
            f"must be a duration of at most {DURATION_MAX.days} days ({DURATION_FORMS}), "
            f"not {text!r}")
    return value


def _read_duration(text):
    if not text:
        return None  # Django's parse_duration reads "" as no time at all
    try:
        if re.fullmatch(r"\d+(\.\d+)?", text):
            return datetime.timedelta(seconds=float(text))
        if re.fullmatch(f"(?:{DURATION_PART.pattern})+", text):
            seconds = sum(float(number) * UNITS[unit] for number, unit in DURATION_PART.findall(text))
            return datetime.timedelta(seconds=seconds)
        return parse_duration(text.upper() if text.startswith("p") else text)
    except (OverflowError, ValueError):
        return None
