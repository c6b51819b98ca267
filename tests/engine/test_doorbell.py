"""The SQLite doorbell: each daemon's datagram socket next to the database file."""

import os
import socket

import pytest
from django.db import connection, transaction

import atp
from atp.engine import doorbell
from atp.engine.databases import database_of


@pytest.fixture
def bell(tmp_path):
    bell = doorbell.Doorbell(tmp_path / "db.sqlite3.atpd")
    yield bell
    bell.close()


def test_a_ring_reaches_every_daemon_once(tmp_path, bell):
    other = doorbell.Doorbell(bell.path.parent)
    try:
        assert not bell.drain()
        assert doorbell.ring(bell.path.parent) == 2
        assert doorbell.ring(bell.path.parent) == 2
        assert bell.drain() and other.drain()
        assert not bell.drain()  # two rings, one wake-up
    finally:
        other.close()
    assert not other.path.exists()


def test_the_socket_of_a_daemon_that_died_is_removed(tmp_path, bell):
    dead = bell.path.parent / "dead.sock"
    orphan = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    orphan.bind(os.fspath(dead))
    orphan.close()  # as a SIGKILLed daemon leaves it
    assert dead.exists()
    assert doorbell.ring(bell.path.parent) == 1
    assert not dead.exists()
    assert bell.drain()


def test_nothing_rings_where_no_daemon_ever_listened(tmp_path):
    assert doorbell.ring(tmp_path / "nobody.atpd") == 0


@pytest.mark.django_db(transaction=True)
def test_an_enqueue_rings_once_it_commits_and_never_for_a_rollback(noop_type):
    if database_of(connection).wakeup != "doorbell":
        pytest.skip("this database wakes its daemons otherwise")
    bell = doorbell.Doorbell(database_of(connection).doorbell_directory(connection))
    try:
        with pytest.raises(RuntimeError), transaction.atomic():
            atp.enqueue("tests.noop")
            assert not bell.drain()  # not before the commit
            raise RuntimeError("the caller rolls back")
        assert not bell.drain()
        atp.enqueue("tests.noop", countdown=60)
        assert not bell.drain()  # nothing runnable yet
        atp.enqueue("tests.noop")
        assert bell.drain()
    finally:
        bell.close()
