"""Migrations that change what existing rows mean."""

import datetime

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)


def migrate(target):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([("atp", target)])
    return executor.loader.project_state([("atp", target)]).apps


def test_types_registered_before_named_tasks_keep_names_free_once_ended():
    old = migrate("0010_type_rate")
    old.get_model("atp", "Type").objects.create(identifier="tests.before", handler="tests.handlers.noop")
    new = migrate("0011_named_tasks")
    Type = new.get_model("atp", "Type")
    assert Type.objects.get(identifier="tests.before").dedup_window is None
    made = Type.objects.create(identifier="tests.after", handler="tests.handlers.noop")
    assert made.dedup_window == datetime.timedelta(days=9)
    from django.db.migrations.loader import MigrationLoader

    leaf = max(name for app, name in MigrationLoader(connection).graph.leaf_nodes() if app == "atp")
    migrate(leaf)


def test_gated_tasks_waiting_before_turns_take_theirs_at_their_due_time_with_their_key():
    old = migrate("0025_semaphores")
    Type, Instance, Task = (old.get_model("atp", name) for name in ("Type", "Instance", "Task"))
    Semaphore, Hold = old.get_model("atp", "Semaphore"), old.get_model("atp", "Hold")
    kind = Type.objects.create(identifier="tests.sync", handler="tests.handlers.noop",
                               key_concurrency=1, gated=True)
    now = datetime.datetime(2026, 11, 27, 12, tzinfo=datetime.UTC)
    key = Semaphore.objects.create(name=f"[{kind.pk}]k", type=kind)
    mutex = Semaphore.objects.create(name="m", limit=1)
    rows = {}
    for name, holds in (("keyed", [mutex, key]), ("held", [mutex]), ("plain", [])):
        instance = Instance.objects.create(type=kind, identifier=name, created=now,
                                           updated=now)
        Task.objects.create(instance=instance, type=kind, identifier=name, enqueued=now,
                            not_before=now + datetime.timedelta(seconds=len(rows)),
                            gated=bool(holds))
        Hold.objects.bulk_create(Hold(instance=instance, semaphore=held) for held in holds)
        rows[name] = instance.pk
    new = migrate("0026_fair_turns")
    found = {pk: (turn, key_id, not_before) for pk, turn, key_id, not_before in
             new.get_model("atp", "Task").objects.values_list("pk", "turn", "key", "not_before")}
    assert found[rows["keyed"]] == (now, key.pk, now)
    assert found[rows["held"]][:2] == (now + datetime.timedelta(seconds=1), None)
    assert found[rows["plain"]][:2] == (None, None)
    from django.db.migrations.loader import MigrationLoader

    leaf = max(name for app, name in MigrationLoader(connection).graph.leaf_nodes() if app == "atp")
    migrate(leaf)
