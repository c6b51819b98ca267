"""Bad input gets the documented error and writes nothing, on every database.

PostgreSQL refuses a NUL character in any text, and no database can encode half of a
UTF-16 surrogate pair; SQLite would store the first silently. Both are refused before
anything is written, as are delays that are no time at all and inputs beyond the
size limit.
"""

import datetime
import math

import pytest
from django.test import override_settings

import atp
from atp import engine
from atp.exceptions import InputsNotSerializable, InputsTooLarge, InvalidParameter
from atp.states import Status
from tests.factories import TaskFactory, snapshot

pytestmark = pytest.mark.django_db

BAD_TEXT = {"NUL": "a\x00b", "lone surrogate": "a\ud800b"}


@pytest.mark.parametrize("text", BAD_TEXT.values(), ids=BAD_TEXT)
def test_an_identifier_no_database_stores_is_refused(noop_type, row_counts, text):
    before = row_counts()
    with pytest.raises(InvalidParameter, match="task identifier"):
        atp.enqueue("tests.noop", identifier=text)
    assert row_counts() == before


@pytest.mark.parametrize("text", BAD_TEXT.values(), ids=BAD_TEXT)
def test_a_type_identifier_or_handler_no_database_stores_is_refused(db, row_counts, text):
    before = row_counts()
    with pytest.raises(InvalidParameter, match="task type identifier"):
        atp.enqueue(text)
    with pytest.raises(InvalidParameter, match="task type identifier"):
        atp.register_task_type(text, "tests.handlers.noop")
    with pytest.raises(InvalidParameter, match="task type identifier"):
        engine.dequeue(engine.register_daemon(), types=[text])
    with pytest.raises(InvalidParameter, match="description"):
        atp.register_task_type("tests.noop", "tests.handlers.noop", description=text)
    assert row_counts() == before


@pytest.mark.parametrize("inputs", [{"k": "\ud800"}, {"\udfff": 1}, ["ok", ("\udc80",)]],
                         ids=["value", "key", "nested"])
def test_inputs_with_a_lone_surrogate_are_refused(noop_type, row_counts, inputs):
    before = row_counts()
    with pytest.raises(InputsNotSerializable, match="lone surrogate"):
        atp.enqueue("tests.noop", inputs)
    with pytest.raises(InputsNotSerializable, match="lone surrogate"):
        atp.enqueue_many("tests.noop", [{"fine": 1}, inputs])
    assert row_counts() == before


def test_a_nul_character_in_inputs_round_trips(noop_type):
    instance = atp.enqueue("tests.noop", {"text": "a\x00b"})
    assert instance.load_inputs() == {"text": "a\x00b"}


@pytest.mark.parametrize("countdown", [
    math.nan, math.inf, -math.inf, 1e12, 10**12, datetime.timedelta(days=10**6),
], ids=["nan", "inf", "-inf", "1e12 s", "10**12 s", "a million days"])
def test_a_countdown_that_is_not_a_usable_delay_is_refused(noop_type, row_counts, countdown):
    before = row_counts()
    with pytest.raises(InvalidParameter, match="countdown"):
        atp.enqueue("tests.noop", countdown=countdown)
    with pytest.raises(InvalidParameter, match="countdown"):
        atp.enqueue_many("tests.noop", [{}], countdown=countdown)
    assert row_counts() == before


@pytest.mark.parametrize("text", BAD_TEXT.values(), ids=BAD_TEXT)
def test_messages_no_database_stores_are_refused_and_change_nothing(noop_type, daemon, text):
    task = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)
    before = snapshot(task)
    for call in (
        lambda: atp.cancel(task, text),
        lambda: atp.pause(task, text),
        lambda: atp.set_status(task, Status.FAILED, text),
        lambda: engine.log(task, text),
        lambda: engine.set_progress(task, 1, 2, text),
    ):
        with pytest.raises(InvalidParameter, match="NUL|lone surrogate"):
            call()
        assert snapshot(task) == before


def test_inputs_beyond_the_size_limit_are_refused_and_nothing_is_written(noop_type, row_counts):
    before = row_counts()
    too_big = {"data": "x" * 2**20}  # 1 MiB of text, plus the JSON around it
    with pytest.raises(InputsTooLarge, match=r"1,048,5\d\d bytes.* at most 1,048,576"):
        atp.enqueue("tests.noop", too_big)
    with pytest.raises(InputsTooLarge):
        atp.enqueue_many("tests.noop", [{}, too_big])
    assert row_counts() == before


@override_settings(ATP_MAX_INPUT_BYTES=100)
def test_the_input_limit_is_a_setting_and_a_type_may_raise_it(db):
    atp.register_task_type("tests.small", "tests.handlers.noop")
    atp.register_task_type("tests.large", "tests.handlers.noop", max_input_bytes=10_000)
    with pytest.raises(InputsTooLarge, match="at most 100 bytes"):
        atp.enqueue("tests.small", "x" * 200)
    assert atp.enqueue("tests.large", "x" * 5_000).load_inputs() == "x" * 5_000
