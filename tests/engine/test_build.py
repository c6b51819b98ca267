"""The engines that write their own SQL build models from the rows it returns
(``atp.engine.sql.build``): the same objects the ORM's ``Model.from_db`` makes."""

import pytest
from django.db import connection
from django.db.models.signals import post_init

import atp
from atp.engine.sql import attach, build
from atp.models import Inputs, Instance, Type

pytestmark = pytest.mark.django_db


def _row(obj):
    """Return ``obj``'s row as the database returns it (before the ORM converts it)."""
    meta = type(obj)._meta
    columns = ", ".join(connection.ops.quote_name(field.column) for field in meta.concrete_fields)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM {meta.db_table} WHERE {meta.pk.column} = %s",
                       [obj.pk])
        return cursor.fetchone()


def _as_from_db(obj):
    """Return ``obj`` read again by the ORM."""
    return type(obj).objects.get(pk=obj.pk)


@pytest.mark.parametrize("model", [Instance, Type, Inputs])
def test_a_built_model_is_the_one_from_db_makes(model, noop_type):
    atp.enqueue("tests.noop", {"n": 1})
    stored = model.objects.order_by("pk").last()
    built, expected = build(model, _row(stored)), _as_from_db(stored)
    assert type(built) is model
    assert {key: value for key, value in vars(built).items() if key != "_state"} == {
        key: value for key, value in vars(expected).items() if key != "_state"}
    assert (built._state.adding, built._state.db) == (False, expected._state.db)
    assert built == stored and built._state.fields_cache == {}


def test_a_built_task_reads_its_type_and_is_saved_as_an_update(noop_type):
    task = atp.enqueue("tests.noop", {"n": 1})
    built = build(Instance, _row(Instance.objects.get(pk=task.pk)))
    assert built.type == noop_type
    built.progress_message = "read back"
    built.save(update_fields=["progress_message"])
    assert Instance.objects.get(pk=task.pk).progress_message == "read back"


def test_what_listens_to_a_models_creation_hears_a_built_one(noop_type):
    heard = []

    def listener(sender, instance, **kwargs):
        heard.append(instance)

    post_init.connect(listener, sender=Instance)
    try:
        atp.enqueue("tests.noop", {"n": 1})
        stored = Instance.objects.order_by("pk").last()
        heard.clear()
        built = build(Instance, _row(stored))
    finally:
        post_init.disconnect(listener, sender=Instance)
    assert heard == [built]


def test_a_task_built_from_rows_gets_its_type_and_inputs_as_the_descriptors_give_them(
        django_assert_num_queries):
    queued = atp.enqueue(atp.register_task_type("tests.echo", "tests.handlers.echo").identifier,
                         {"n": 1})
    instance, task_type, inputs = (build(Instance, _row(queued)), build(Type, _row(queued.type)),
                                   build(Inputs, _row(queued.inputs)))
    attach(instance, type=task_type, inputs=inputs)
    assigned = build(Instance, _row(queued))
    assigned.type, assigned.inputs = task_type, build(Inputs, _row(queued.inputs))
    with django_assert_num_queries(0):
        assert instance.type is task_type and instance.inputs is inputs
        assert inputs.instance is instance and assigned.inputs.instance is assigned
    assert _fields(instance) == _fields(assigned)
    assert _fields(inputs) == _fields(assigned.inputs)
    # A task with no inputs row reads NULLs for them: the key is copied, as assigning does.
    empty = Inputs(instance_id=None, input_format=None, data=None)
    attach(instance, inputs=empty)
    assert (empty.instance_id, instance.inputs) == (instance.pk, empty)


def _fields(obj):
    return {key: value for key, value in vars(obj).items() if key != "_state"}
