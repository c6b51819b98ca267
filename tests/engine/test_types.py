import datetime

import pytest

import atp
from atp import registry
from atp.engine.types import catalog_rows
from atp.exceptions import InvalidHandler, InvalidParameter, TaskTypeInUse, TaskTypeNotFound
from atp.models import Type
from tests import handlers
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


def test_a_type_is_registered_with_a_function_or_its_dotted_path():
    by_function = atp.register_task_type("tests.a", handlers.echo, timeout=30)
    by_path = atp.register_task_type("tests.b", "tests.handlers.echo")
    assert by_function.handler == by_path.handler == "tests.handlers.echo"
    assert by_function.timeout == datetime.timedelta(seconds=30)
    assert (by_path.timeout, by_path.max_restarts, by_path.retention) == (datetime.timedelta(hours=1), 3, None)


def test_registering_again_updates_only_the_parameters_given():
    atp.register_task_type("tests.a", handlers.echo, timeout=30, max_restarts=5)
    updated = atp.register_task_type("tests.a", handlers.noop, retention=datetime.timedelta(days=7))
    assert Type.objects.filter(identifier="tests.a").count() == 1
    assert updated.handler == "tests.handlers.noop"
    assert (updated.timeout.total_seconds(), updated.max_restarts) == (30, 5)
    assert updated.retention == datetime.timedelta(days=7)


@pytest.mark.parametrize(
    "handler, message",
    [
        ("os.system", "not in an installed app"),
        (print, "module-level function"),
        (lambda task, inputs: None, "module-level function"),
        ("tests.handlers.getpid", "not a function defined in tests.handlers"),
    ],
)
def test_a_handler_that_may_not_run_is_refused_and_nothing_is_written(handler, message):
    with pytest.raises(InvalidHandler, match=message):
        atp.register_task_type("tests.evil", handler)
    assert not Type.objects.filter(identifier="tests.evil").exists()


def test_unknown_or_bad_parameters_are_refused():
    with pytest.raises(InvalidParameter, match="unknown task type parameter"):
        atp.register_task_type("tests.a", handlers.echo, retries=3)
    with pytest.raises(InvalidParameter, match="max_restarts"):
        atp.register_task_type("tests.a", handlers.echo, max_restarts="3")
    assert not Type.objects.filter(identifier="tests.a").exists()


def test_a_type_with_tasks_cannot_be_unregistered(noop_type):
    TaskFactory(type=noop_type, status="FINISHED")
    with pytest.raises(TaskTypeInUse, match="'tests.noop' still has 1 task"):
        atp.unregister_task_type("tests.noop")
    assert Type.objects.filter(identifier="tests.noop").exists()


def test_an_unused_type_is_unregistered(noop_type):
    atp.unregister_task_type("tests.noop")
    assert not Type.objects.filter(identifier="tests.noop").exists()
    with pytest.raises(TaskTypeNotFound):
        atp.unregister_task_type("tests.noop")


def test_declared_types_are_in_the_database_after_migrate():
    declared = Type.objects.get(identifier="tests.declared")
    assert (declared.handler, declared.max_restarts) == ("tests.handlers.declared", 1)
    assert declared.timeout == datetime.timedelta(seconds=5)


@pytest.mark.parametrize("change", [
    {"max_restarts": 9},
    {"timeout": datetime.timedelta(seconds=6)},
    {"description": "changed by hand"},
    {"handler": "tests.handlers.noop"},
], ids=lambda change: next(iter(change)))
def test_syncing_the_declarations_rewrites_only_the_types_that_differ_from_theirs(change):
    from atp.engine import sync_declared_types

    declared = Type.objects.filter(identifier__in=registry.declarations())
    assert declared.count() >= 10
    Type.objects.filter(identifier="tests.declared").update(**change)
    before = dict(declared.values_list("identifier", "updated"))
    synced = {task_type.identifier: task_type for task_type in sync_declared_types()}
    after = dict(declared.values_list("identifier", "updated"))
    assert {name for name in after if after[name] != before[name]} == {"tests.declared"}
    rewritten = Type.objects.get(identifier="tests.declared")
    assert (rewritten.max_restarts, rewritten.timeout, rewritten.description, rewritten.handler) == (
        1, datetime.timedelta(seconds=5), "declared in code", "tests.handlers.declared")
    assert synced.keys() == before.keys()
    assert synced["tests.declared"].max_restarts == 1


def _declare(monkeypatch, identifier, **parameters):
    monkeypatch.setitem(registry._declarations, identifier, registry.Declaration(
        identifier, "tests.handlers.noop",
        registry.clean_type_parameters(parameters, allow_pickle=True)))


def test_a_declared_rate_and_its_bucket_are_what_syncing_compares(monkeypatch):
    from atp.engine import sync_declared_types

    _declare(monkeypatch, "tests.rated_declared", rate="20/m", bucket_size=3, min_backoff=0.25)
    sync_declared_types()
    stored = Type.objects.filter(identifier="tests.rated_declared")
    written = stored.get().updated
    sync_declared_types()
    assert stored.get().updated == written  # nothing differs: not rewritten
    stored.update(bucket_size=4)
    sync_declared_types()
    assert stored.get().bucket_size == 3


def test_a_declared_bucket_without_a_rate_is_refused_on_a_fresh_database_too(monkeypatch):
    from atp.engine import sync_declared_types

    _declare(monkeypatch, "tests.bucket_only", bucket_size=3)
    with pytest.raises(InvalidParameter, match="bucket_size needs a rate"):
        sync_declared_types()
    assert not Type.objects.filter(identifier="tests.bucket_only").exists()


def test_declared_types_missing_are_written_together_and_one_written_meanwhile_is_synced(monkeypatch):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from atp.engine import sync_declared_types, types

    Type.objects.filter(identifier__in=registry.declarations()).delete()
    create, created = types._create, []

    def another_process_first(declarations):
        Type.objects.create(identifier="tests.declared", handler="tests.handlers.noop", max_restarts=7)
        created.extend(declaration.identifier for declaration in declarations)
        create(declarations)

    monkeypatch.setattr(types, "_create", another_process_first)
    with CaptureQueriesContext(connection) as queries:
        synced = {task_type.identifier: task_type for task_type in sync_declared_types()}
    assert set(created) == synced.keys() and len(created) >= 10
    inserts = [query["sql"] for query in queries.captured_queries
               if query["sql"].lstrip().upper().startswith("INSERT") and "atp_type" in query["sql"]]
    assert len(inserts) == 2, inserts  # the other process's, then all the declarations at once
    assert synced.keys() == set(Type.objects.filter(identifier__in=registry.declarations())
                                .values_list("identifier", flat=True))
    declared = Type.objects.get(identifier="tests.declared")
    assert (declared.handler, declared.max_restarts) == ("tests.handlers.declared", 1)
    assert synced["tests.declared"].max_restarts == 1


def test_pausing_a_type_is_recorded(noop_type):
    assert atp.pause_type("tests.noop").is_paused
    assert not atp.resume_type(noop_type).is_paused
    with pytest.raises(TaskTypeNotFound):
        atp.pause_type("tests.nope")


def test_updating_a_type_changes_only_what_is_named(noop_type):
    from atp import engine

    engine.pause_type(noop_type)  # by someone else, after the caller read the type
    updated = engine.update_task_type("tests.noop", timeout=90, max_concurrency=None)
    assert updated.timeout == datetime.timedelta(seconds=90)
    assert updated.is_paused and updated.handler == "tests.handlers.noop"
    with pytest.raises(InvalidParameter, match="max_restarts must be an integer"):
        engine.update_task_type("tests.noop", timeout=5, max_restarts=-1)
    assert Type.objects.get(pk=noop_type.pk).timeout == datetime.timedelta(seconds=90)
    with pytest.raises(TaskTypeNotFound):
        engine.update_task_type("tests.nothing", timeout=5)


def test_a_daemons_catalog_reads_each_type_with_its_handler_and_what_limits_it():
    atp.register_task_type("tests.limited", "tests.handlers.noop", max_concurrency=2)
    atp.register_task_type("tests.rated", "tests.handlers.echo", rate="5/s")
    atp.register_pull_type("tests.pull")
    rows = {row[1]: row for row in catalog_rows()}
    limited, rated, pull = rows["tests.limited"], rows["tests.rated"], rows["tests.pull"]
    assert limited[0] == Type.objects.get(identifier="tests.limited").pk
    assert limited[2:] == ("tests.handlers.noop", "json", 2, None, False, False)
    assert (rated[2], rated[4], rated[6]) == ("tests.handlers.echo", None, False)
    assert rated[5] is not None
    assert pull[6] is True
    atp.enqueue("tests.limited", hold=["m"])  # the first task naming a semaphore gates it
    assert {row[1]: row[7] for row in catalog_rows()}["tests.limited"] is True
