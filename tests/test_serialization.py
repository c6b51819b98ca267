import datetime
import decimal
import math
import pickle
import uuid
from pathlib import Path

import pytest
from django.core import signing
from django.test import override_settings

from atp.exceptions import InputsNotSerializable, InvalidResponse, TamperedInputs
from atp.serialization import (
    InputFormat,
    dump_inputs,
    dump_json,
    dump_pickle,
    encode_response,
    load_inputs,
    load_json,
    load_pickle,
    pickled_size,
)

ROUND_TRIP = {
    "aware": datetime.datetime(2026, 11, 21, 9, 30, 1, 123456, tzinfo=datetime.UTC),
    "offset": datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
    "naive": datetime.datetime(2026, 1, 2, 3, 4, 5),
    "date": datetime.date(2026, 2, 28),
    "time": datetime.time(23, 59, 58, 1),
    "delta": datetime.timedelta(days=-1, seconds=5, microseconds=7),
    "decimal": decimal.Decimal("12345678901234567890.000000000001"),
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "bytes": b"\x00\xffbinary",
    "tuple": (1, "two", (3.0,)),
    "set": {3, 1, 2},
    "frozenset": frozenset({"a"}),
    "floats": [1.5, math.inf, -math.inf],
    "plain": {"list": [1, None, True, "é"], "nested": {"deep": [{"x": 1}]}},
    "tag_lookalike": {"__atp__": "datetime", "value": "not a date"},
}


@pytest.mark.parametrize("key", ROUND_TRIP)
def test_json_inputs_come_back_as_the_same_python_values(key):
    value = ROUND_TRIP[key]
    restored = load_json(dump_json(value))
    assert restored == value
    assert type(restored) is type(value)


def test_nan_round_trips():
    assert math.isnan(load_json(dump_json(float("nan"))))


def test_json_stays_readable_json():
    text = dump_json({"user": 42, "when": datetime.date(2026, 1, 1)})
    assert text == '{"user":42,"when":{"__atp__":"date","value":"2026-01-01"}}'


@pytest.mark.parametrize(
    "value, where",
    [
        (object(), "inputs is a object"),
        ({"file": open}, "inputs['file'] is a builtin_function_or_method"),
        ([1, {"x": [Path("/tmp")]}], "inputs[1]['x'][0] is a PosixPath"),
        ({1: "int key"}, "inputs has the key 1"),
    ],
)
def test_values_json_cannot_hold_are_refused_with_where_they_are(value, where):
    with pytest.raises(InputsNotSerializable, match=f"^{__import__('re').escape(where)}"):
        dump_json(value)


def test_pickle_round_trips_what_json_cannot(pickle_enabled):
    value = {"path": Path("/tmp/x"), "when": datetime.date(2026, 1, 1)}
    token = dump_pickle(value)
    assert load_pickle(token) == value
    assert load_inputs(token, InputFormat.PICKLE) == value
    assert pickled_size(len(token), token[-100:]) == len(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


@pytest.mark.parametrize("length", [0, 1, 2, 3, 1000])  # every base64 padding
def test_a_pickles_size_is_read_from_the_end_of_its_token(length):
    value = b"x" * length
    token = dump_pickle(value)
    expected = len(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    assert pickled_size(len(token), token[-100:]) == expected


def test_unpicklable_inputs_are_refused():
    with pytest.raises(InputsNotSerializable, match="cannot be pickled"):
        dump_inputs(lambda: None, InputFormat.PICKLE)


class Tripwire:
    """Unpickling this calls ``Path.touch`` on its path: proof that it was unpickled."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


def test_a_tampered_pickle_is_refused_before_it_is_unpickled(pickle_enabled, tmp_path):
    tripwire = tmp_path / "unpickled"
    token = dump_pickle(Tripwire(tripwire))
    assert not tripwire.exists()
    forged = signing.Signer(key="attacker's key", salt="atp.inputs.pickle").sign(
        token.rsplit(":", 1)[0]
    )
    for bad in (forged, token[:-1] + ("A" if token[-1] != "A" else "B"), "garbage"):
        with pytest.raises(TamperedInputs):
            load_pickle(bad)
    assert not tripwire.exists()
    load_pickle(token)  # the genuine token is unpickled: the tripwire works
    assert tripwire.exists()


def test_a_pickle_signed_before_a_key_rotation_still_loads(pickle_enabled):
    with override_settings(SECRET_KEY="old key"):
        token = dump_pickle([1, 2])
    with override_settings(SECRET_KEY="new key", SECRET_KEY_FALLBACKS=["old key"]):
        assert load_pickle(token) == [1, 2]
    with override_settings(SECRET_KEY="new key"), pytest.raises(TamperedInputs):
        load_pickle(token)


@pytest.mark.parametrize(
    "data, content_type, expected",
    [
        (b"\x89PNG", "image/png", (b"\x89PNG", "image/png", "")),
        (b"raw", None, (b"raw", "application/octet-stream", "")),
        ("<a/>", "application/xml", (b"<a/>", "application/xml", "utf-8")),
        ("héllo", None, ("héllo".encode(), "text/plain", "utf-8")),
        ({"n": 1}, None, (b'{"n": 1}', "application/json", "utf-8")),
        ([datetime.date(2026, 1, 1)], None, (b'["2026-01-01"]', "application/json", "utf-8")),
    ],
)
def test_responses_keep_bytes_text_or_json_with_a_content_type(data, content_type, expected):
    assert encode_response(data, content_type) == expected


def test_a_response_that_is_none_of_those_is_refused():
    with pytest.raises(InvalidResponse, match="a object cannot be stored"):
        encode_response(object())
