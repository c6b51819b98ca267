"""A daemon's verbs run as one statement in autocommit mode on PostgreSQL (no transaction
to roll back): refused, each must have written nothing at all, on every engine."""

import pytest

import atp
from atp import engine
from atp.exceptions import AttemptSuperseded, InvalidTransition
from atp.models import LogRecord, Task
from atp.states import Status
from tests.factories import drive, snapshot

pytestmark = pytest.mark.django_db(transaction=True)


def _unchanged(instance, before):
    assert snapshot(instance) == before


def test_a_superseded_finish_writes_nothing(noop_type, daemon):
    instance = drive(atp.enqueue("tests.noop"), Status.RUNNING, daemon=daemon)
    before = snapshot(instance)
    with pytest.raises(AttemptSuperseded):
        engine.finish(instance, attempt=instance.attempt + 1, daemon=daemon, response={"a": 1})
    _unchanged(instance, before)
    assert Task.objects.get(pk=instance.pk).daemon_id == daemon.pk  # the lease stays


def test_a_finish_of_a_task_not_running_writes_nothing(noop_type, daemon):
    instance = drive(atp.enqueue("tests.noop"), Status.SCHEDULED, daemon=daemon)
    before = snapshot(instance)
    with pytest.raises(InvalidTransition):
        engine.finish(instance, attempt=1, daemon=daemon)
    _unchanged(instance, before)


def test_a_superseded_start_writes_nothing(noop_type, daemon):
    instance = drive(atp.enqueue("tests.noop"), Status.SCHEDULED, daemon=daemon)
    before = snapshot(instance)
    with pytest.raises(AttemptSuperseded):
        engine.start_and_load(instance, attempt=2, daemon=daemon)
    _unchanged(instance, before)
    assert LogRecord.objects.filter(instance=instance.pk, status=Status.RUNNING).count() == 0
