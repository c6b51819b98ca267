"""How task inputs and responses are stored.

Inputs are JSON by default. Values JSON has no type for (datetimes, decimals, UUIDs,
tuples, bytes...) are written as small tagged objects ``{"__atp__": tag, "value": ...}``
so they come back as the same Python type. A type may opt in to pickle instead; its
payload is signed with the project's ``SECRET_KEY`` and the signature is checked before
anything is unpickled, so a row written by anyone without the key is never unpickled.
"""

import base64
import datetime
import decimal
import json
import math
import pickle
import uuid

from django.core import signing
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models

from atp.conf import conf
from atp.exceptions import (
    InputsNotSerializable,
    InvalidParameter,
    InvalidResponse,
    ResponseTooLarge,
    TamperedInputs,
)

TAG = "__atp__"
PICKLE_SALT = "atp.inputs.pickle"


class InputFormat(models.TextChoices):
    JSON = "json", "JSON"
    PICKLE = "pickle", "signed pickle"


def dump_inputs(value, input_format=InputFormat.JSON):
    """Return ``value`` encoded as text in ``input_format``; raise ``InputsNotSerializable``."""
    if input_format == InputFormat.PICKLE:
        return dump_pickle(value)
    return dump_json(value)


def load_inputs(text, input_format=InputFormat.JSON):
    """Return the value encoded in ``text``; raise ``TamperedInputs`` for a bad signature."""
    if input_format == InputFormat.PICKLE:
        return load_pickle(text)
    return load_json(text)


# -- text every database stores ------------------------------------------------------


def text_fault(text):
    """Return why no database stores ``text`` (a NUL, half a surrogate pair), or None."""
    if "\x00" in text:
        return "holds a NUL character, which PostgreSQL does not store"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (f"holds a lone surrogate ({text[exc.start]!r} at position {exc.start}), "
                "half of a UTF-16 pair, which is not text")
    return None


def check_text(text, what):
    """Raise ``InvalidParameter`` unless ``text`` is a string every database stores."""
    if not isinstance(text, str):
        raise InvalidParameter(f"{what} must be a string, not {text!r}")
    fault = text_fault(text)
    if fault is not None:
        raise InvalidParameter(f"{what} {fault}")


def storable(text):
    """Return ``text`` with what no database stores written as escapes (``\\x00``, ``\\ud800``).

    For text that must be recorded whatever it holds: tracebacks, exception messages.
    """
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


# -- JSON ----------------------------------------------------------------------------


def dump_json(value):
    """Return ``value`` as tagged JSON text; raise ``InputsNotSerializable``."""
    text = json.dumps(
        _to_json(value, "inputs"), ensure_ascii=False, separators=(",", ":"), allow_nan=False
    )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        path, fault = _first_bad_text(value, "inputs")
        raise InputsNotSerializable(f"{path} {fault}") from None
    return text


def _first_bad_text(value, path):
    """Return ``(path, fault)`` of the first string (or key) in ``value`` no database stores."""
    if isinstance(value, str):
        fault = text_fault(value)
        return (path, fault) if fault else None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _first_bad_text(key, f"{path} key {key!r}") or _first_bad_text(
                item, f"{path}[{key!r}]")
            if found:
                return found
    elif isinstance(value, (list, tuple, set, frozenset)):
        for index, item in enumerate(value):
            found = _first_bad_text(item, f"{path}[{index}]")
            if found:
                return found
    return None


def load_json(text):
    """Return the value encoded by ``dump_json``."""
    if isinstance(text, str):  # json.loads would make a decoder for each call
        return _JSON_DECODER.decode(text)
    return json.loads(text, object_hook=_from_json)


def _tagged(tag, value):
    return {TAG: tag, "value": value}


def _to_json(value, path):
    # bool before int and datetime before date: each is a subclass of the other.
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _tagged("float", repr(value))
    if isinstance(value, dict):
        return _dict_to_json(value, path)
    if isinstance(value, list):
        return [_to_json(item, f"{path}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, (tuple, set, frozenset)):
        items = value if isinstance(value, tuple) else _stable_order(value)
        encoded = [_to_json(item, f"{path}[{index}]") for index, item in enumerate(items)]
        return _tagged(type(value).__name__, encoded)
    for python_type, tag, encode in _SCALARS:
        if isinstance(value, python_type):
            return _tagged(tag, encode(value))
    raise InputsNotSerializable(
        f"{path} is a {type(value).__name__}, which cannot be stored as JSON; pass "
        "JSON-compatible values (str, numbers, lists, dicts, datetimes, decimals, "
        "UUIDs, bytes) or register the task type with input_format='pickle'"
    )


def _dict_to_json(value, path):
    for key in value:
        if not isinstance(key, str):
            raise InputsNotSerializable(
                f"{path} has the key {key!r}: JSON objects only have string keys"
            )
    encoded = {key: _to_json(item, f"{path}[{key!r}]") for key, item in value.items()}
    if TAG in encoded:
        # A user dict that uses our tag key is stored as pairs, so it can never be
        # mistaken for a tagged value on the way back.
        return _tagged("dict", [[key, item] for key, item in encoded.items()])
    return encoded


def _stable_order(items):
    try:
        return sorted(items)
    except TypeError:
        return list(items)


_SCALARS = (
    (datetime.datetime, "datetime", datetime.datetime.isoformat),
    (datetime.date, "date", datetime.date.isoformat),
    (datetime.time, "time", datetime.time.isoformat),
    (datetime.timedelta, "timedelta", lambda d: [d.days, d.seconds, d.microseconds]),
    (decimal.Decimal, "decimal", str),
    (uuid.UUID, "uuid", str),
    ((bytes, bytearray, memoryview), "bytes", lambda b: base64.b64encode(b).decode("ascii")),
)

_DECODERS = {
    "float": float,
    "tuple": tuple,
    "set": set,
    "frozenset": frozenset,
    "dict": dict,
    "datetime": datetime.datetime.fromisoformat,
    "date": datetime.date.fromisoformat,
    "time": datetime.time.fromisoformat,
    "timedelta": lambda parts: datetime.timedelta(*parts),
    "decimal": decimal.Decimal,
    "uuid": uuid.UUID,
    "bytes": base64.b64decode,
}


def _from_json(obj):
    if len(obj) == 2 and TAG in obj and "value" in obj:
        return _DECODERS[obj[TAG]](obj["value"])
    return obj


_JSON_DECODER = json.JSONDecoder(object_hook=_from_json)


# -- signed pickle -------------------------------------------------------------------


def check_pickle_enabled():
    """Raise ``InvalidParameter`` unless ``ATP_PICKLE_ENABLED`` allows pickled inputs."""
    if not conf.PICKLE_ENABLED:
        raise InvalidParameter(
            "pickled inputs are off: a type with input_format='pickle' runs whatever its "
            "inputs unpickle to. Set ATP_PICKLE_ENABLED = True to allow it (see "
            "docs/security.md), or pass JSON inputs"
        )


def _signer():
    # Signer checks SECRET_KEY_FALLBACKS too, so rotating the key keeps queued tasks.
    return signing.Signer(salt=PICKLE_SALT)


def dump_pickle(value):
    """Return ``value`` pickled and signed, as text; raise ``InputsNotSerializable``."""
    try:
        payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise InputsNotSerializable(f"inputs cannot be pickled: {exc}") from exc
    return _signer().sign(base64.b64encode(payload).decode("ascii"))


def load_pickle(token):
    """Return the value of a signed pickle; raise ``TamperedInputs`` before unpickling a bad one.

    Raise ``InvalidParameter`` while ``ATP_PICKLE_ENABLED`` is off: nothing is unpickled then.
    """
    check_pickle_enabled()
    try:
        encoded = _signer().unsign(token)
    except signing.BadSignature as exc:
        raise TamperedInputs() from exc
    return pickle.loads(base64.b64decode(encoded))


#: The end of a signed pickle that holds its signature and the base64 padding.
TOKEN_END_CHARS = 100


def pickled_size(token_length, token_end):
    """Return the size in bytes of the pickle inside a signed token, without unpickling it.

    Only the token's length and its last ``TOKEN_END_CHARS`` characters are needed,
    so a database can hand them over without the token itself.
    """
    encoded_end, signature = token_end.rsplit(":", 1)
    encoded_length = token_length - len(signature) - 1
    return encoded_length * 3 // 4 - encoded_end.count("=", -2)


# -- responses -----------------------------------------------------------------------


CONTENT_TYPE_MAX_LENGTH = 255


def encode_response(data, content_type=None, *, max_bytes=None):
    """Return ``(bytes, content_type, charset)`` for a response; raise ``InvalidResponse``.

    Bytes are kept as they are, text is stored as UTF-8, and any other value is
    stored as JSON. Raise ``ResponseTooLarge`` when the bytes exceed ``max_bytes``.
    """
    if isinstance(data, (bytes, bytearray, memoryview)):
        payload, default_type, charset = bytes(data), "application/octet-stream", ""
    elif isinstance(data, str):
        payload, default_type, charset = _utf8(data, "a str"), "text/plain", "utf-8"
    else:
        try:
            text = json.dumps(data, cls=DjangoJSONEncoder, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise InvalidResponse(
                f"a {type(data).__name__} cannot be stored as a response: give bytes, "
                "text or a JSON-serialisable value"
            ) from exc
        payload, default_type, charset = _utf8(text, f"a {type(data).__name__}"), \
            "application/json", "utf-8"
    content_type = _content_type(content_type, default_type)
    if max_bytes is not None and len(payload) > max_bytes:
        raise ResponseTooLarge(
            f"the response is {len(payload):,} bytes, more than the {max_bytes:,} bytes its "
            "task type allows (max_response_bytes, ATP_MAX_RESPONSE_BYTES)"
        )
    return payload, content_type, charset


def _utf8(text, what):
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidResponse(
            f"{what} cannot be stored as a response: it is not valid text ({text_fault(text)})"
        ) from None


def _content_type(content_type, default):
    if content_type is None:
        return default
    fault = (text_fault(content_type) if isinstance(content_type, str) else "is not a string")
    if fault is None and not 0 < len(content_type) <= CONTENT_TYPE_MAX_LENGTH:
        fault = f"must have 1 to {CONTENT_TYPE_MAX_LENGTH} characters"
    if fault is not None:
        raise InvalidResponse(f"the content type {content_type!r:.80} {fault}")
    return content_type
