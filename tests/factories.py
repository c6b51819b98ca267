"""Factories for the tests. Tasks are made through the API, as users make them."""

import datetime

import factory
from factory.django import DjangoModelFactory

import atp
from atp import engine
from atp.models import Instance, LogRecord, Task, Type
from atp.states import Status


class TypeFactory(DjangoModelFactory):
    class Meta:
        model = Type
        django_get_or_create = ("identifier",)

    identifier = factory.Sequence(lambda n: f"tests.type{n}")
    handler = "tests.handlers.noop"


class TaskFactory(factory.Factory):
    """Enqueue a task with ``atp.enqueue``; ``status`` drives it there with the verbs."""

    class Meta:
        model = Instance

    type = factory.SubFactory(TypeFactory)
    inputs = factory.Dict({})
    status = Status.ACCEPTED

    @classmethod
    def _create(cls, model_class, type, inputs, status, daemon=None, **options):
        instance = atp.enqueue(type, inputs, **options)
        return drive(instance, status, daemon=daemon)


def drive(instance, status, *, daemon=None):
    """Bring a freshly enqueued task to ``status`` through the queue verbs; return it."""
    if status == Status.ACCEPTED:
        return instance
    if status == Status.CANCELLED:
        engine.cancel(instance)
        return Instance.objects.get(pk=instance.pk)
    daemon = daemon or engine.register_daemon()
    claimed = claim_exactly(instance, daemon)
    if status != Status.SCHEDULED:
        engine.start(instance, attempt=claimed.attempt)
        if status == Status.PAUSED:
            engine.pause(instance)
        elif status == Status.FINISHED:
            engine.finish(instance, attempt=claimed.attempt)
        elif status == Status.FAILED:
            engine.fail(instance, "failed on purpose", attempt=claimed.attempt)
    return Instance.objects.get(pk=instance.pk)


def claim_exactly(instance, daemon):
    """Claim ``instance`` for ``daemon``, whatever else is queued; return it claimed."""
    queued = Task.objects.filter(pk=instance.pk)
    priority = queued.values_list("priority", flat=True).get()
    queued.update(priority=32767)  # first in line for this one claim
    claimed = engine.dequeue(daemon, limit=1, types=[instance.type.identifier])
    queued.update(priority=priority)
    assert [task.pk for task in claimed] == [instance.pk], "the task was not claimable"
    return claimed[0]


def snapshot(instance):
    """Return everything a refused change must leave as it was."""
    row = Instance.objects.filter(pk=instance.pk).values().get()
    task = Task.objects.filter(pk=instance.pk).values().first()
    return row, task, LogRecord.objects.filter(instance_id=instance.pk).count()


def running(instance, daemon):
    """Claim ``instance`` for ``daemon`` and start it; return it as it now is."""
    claimed = claim_exactly(instance, daemon)
    engine.start(claimed, attempt=claimed.attempt, daemon=daemon)
    return Instance.objects.get(pk=instance.pk)


def come_due(instance):
    """Make a task waiting for its time runnable: its not-before time moved before its
    enqueue (nothing sleeps through a wait)."""
    Task.objects.filter(pk=instance.pk).update(not_before=Task.objects.get(
        pk=instance.pk).enqueued - datetime.timedelta(seconds=1))
