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
