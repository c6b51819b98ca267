"""The peers' no-op body and the reading of its records (bench/peers/body.py)."""

import pytest

from bench.peers import body
from bench.peers.body import Records


@pytest.fixture
def records_directory(tmp_path, monkeypatch):
    monkeypatch.setenv(body.RECORDS_ENV, str(tmp_path))
    monkeypatch.setattr(body, "_sink_pid", None)
    return tmp_path


def test_a_run_is_read_with_its_start_and_end(records_directory):
    body.record(7)
    body.record("8")

    records = Records(records_directory)

    assert records.read() == 2
    started, ended = records.runs[7]
    assert started <= ended
    assert set(records.runs) == {7, 8}


def test_a_line_being_written_is_read_once_it_is_whole(records_directory):
    path = records_directory / "1.rec"
    path.write_text("1 10.0 10.5\n2 11.0")
    records = Records(records_directory)

    assert records.read() == 1

    with open(path, "a") as file:
        file.write(" 11.5\n")
    assert records.read() == 2
    assert records.runs[2] == (11.0, 11.5)


def test_a_task_run_twice_is_counted_once_and_said(records_directory):
    (records_directory / "1.rec").write_text("1 10.0 10.5\n")
    (records_directory / "2.rec").write_text("1 12.0 12.5\n")
    records = Records(records_directory)

    assert records.read() == 1
    assert records.repeated == 1
