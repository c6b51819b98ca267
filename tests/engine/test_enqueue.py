import datetime
import decimal
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import atp
from atp import engine
from atp.engine.engines import engine as engine_of_the_database
from atp.exceptions import (
    InputsNotSerializable,
    InvalidParameter,
    TaskAlreadyExists,
    TaskTypeNotFound,
)
from atp.models import Inputs, Instance, LogRecord, Task, Type
from atp.states import Status
from tests.factories import TaskFactory, drive

pytestmark = pytest.mark.django_db


class Boom(Exception):
    pass


def test_enqueue_writes_the_task_its_inputs_queue_row_and_history(noop_type):
    inputs = {"when": datetime.date(2026, 1, 1), "amount": decimal.Decimal("9.99")}
    instance = atp.enqueue("tests.noop", inputs, identifier="job-1", priority=3)

    stored = Instance.objects.get(pk=instance.pk)
    assert (stored.type, stored.identifier, stored.status) == (noop_type, "job-1", Status.ACCEPTED)
    assert (stored.priority, stored.attempt, stored.restarts) == (3, 0, 0)
    assert stored.load_inputs() == inputs
    task = Task.objects.get(pk=instance.pk)
    assert (task.identifier, task.priority, task.daemon) == ("job-1", 3, None)
    assert task.not_before == task.enqueued
    [record] = LogRecord.objects.filter(instance=instance)
    assert (record.status, record.attempt) == (Status.ACCEPTED, 0)
    # Timestamps come from the database clock; the returned object loads them lazily.
    assert instance.created == stored.created
    assert abs(instance.created - timezone.now()) < datetime.timedelta(minutes=1)


def test_a_generated_identifier_is_unique(noop_type):
    first, second = atp.enqueue("tests.noop"), atp.enqueue("tests.noop")
    assert first.identifier != second.identifier
    assert len(first.identifier) == 32


def test_a_rolled_back_savepoint_leaves_nothing(noop_type, row_counts):
    before = row_counts()
    with pytest.raises(Boom), transaction.atomic():
        atp.enqueue("tests.noop", {"x": 1})
        raise Boom
    assert row_counts() == before


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_transaction_leaves_nothing(noop_type, row_counts):
    before = row_counts()
    with pytest.raises(Boom), transaction.atomic():
        instance = atp.enqueue("tests.noop", {"x": 1})
        assert Instance.objects.filter(pk=instance.pk).exists()
        raise Boom
    assert row_counts() == before
    assert not connection.in_atomic_block


@pytest.mark.django_db(transaction=True)
def test_enqueue_commits_with_the_callers_transaction(noop_type):
    with transaction.atomic():
        instance = atp.enqueue("tests.noop")
        atp.enqueue("tests.noop")
    assert Instance.objects.filter(pk=instance.pk, status=Status.ACCEPTED).exists()


def test_a_live_duplicate_identifier_is_refused_and_changes_nothing(noop_type, row_counts):
    atp.enqueue("tests.noop", identifier="report-42")
    before = row_counts()
    with transaction.atomic():
        with pytest.raises(TaskAlreadyExists, match="'tests.noop' already has 'report-42'"):
            atp.enqueue("tests.noop", {"other": True}, identifier="report-42")
        # The caller's transaction is still usable after the refusal.
        atp.enqueue("tests.noop", identifier="report-43")
    after = row_counts()
    assert {name: after[name] - before[name] for name in after} == {
        "Instance": 1, "Inputs": 1, "Task": 1, "LogRecord": 1, "Response": 0,
    }


@pytest.mark.parametrize("status", [Status.SCHEDULED, Status.RUNNING, Status.PAUSED])
def test_an_identifier_stays_taken_while_its_task_is_in_flight(noop_type, status):
    TaskFactory(type=noop_type, identifier="busy", status=status)
    with pytest.raises(TaskAlreadyExists):
        atp.enqueue("tests.noop", identifier="busy")


@pytest.mark.parametrize("status", [Status.FINISHED, Status.FAILED, Status.CANCELLED])
def test_an_ended_task_frees_its_identifier_without_a_dedup_window(noop_type, status):
    atp.register_task_type("tests.noop", "tests.handlers.noop", dedup_window=None)
    ended = TaskFactory(type=noop_type, identifier="nightly", status=status)
    again = atp.enqueue("tests.noop", identifier="nightly")
    assert again.pk != ended.pk
    assert Instance.objects.filter(identifier="nightly").count() == 2


def test_identifiers_are_unique_per_type_only(noop_type):
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    atp.enqueue("tests.noop", identifier="same")
    atp.enqueue("tests.echo", identifier="same")


def test_an_unknown_type_is_refused_and_changes_nothing(db, row_counts):
    before = row_counts()
    with pytest.raises(TaskTypeNotFound, match="no task type 'nope' is registered"):
        atp.enqueue("nope", {"x": 1})
    assert row_counts() == before


def test_non_json_inputs_are_refused_and_change_nothing(noop_type, row_counts):
    before = row_counts()
    with pytest.raises(InputsNotSerializable, match=r"inputs\['path'\] is a PosixPath"):
        atp.enqueue("tests.noop", {"path": Path("/etc/passwd")})
    assert row_counts() == before


def test_a_pickle_type_takes_what_json_cannot(pickle_enabled, db):
    atp.register_task_type("tests.pickled", "tests.handlers.echo", input_format="pickle")
    instance = atp.enqueue("tests.pickled", {"path": Path("/tmp")})
    inputs = Inputs.objects.get(pk=instance.pk)
    assert inputs.input_format == "pickle"
    assert inputs.load() == {"path": Path("/tmp")}


@pytest.mark.parametrize(
    "options, message",
    [
        ({"identifier": ""}, "non-empty string"),
        ({"identifier": 42}, "non-empty string"),
        ({"identifier": "x" * 501}, "at most 500"),
        ({"identifier": "a b"}, "only letters, digits"),
        ({"identifier": "a/b"}, "only letters, digits"),
        ({"identifier": "café"}, "only letters, digits"),
        ({"identifier": "a\x00"}, "only letters, digits"),
        ({"priority": 1.5}, "priority must be an integer"),
        ({"priority": 40000}, "priority must be an integer"),
        ({"priority": True}, "priority must be an integer"),
        ({"eta": datetime.datetime(2030, 1, 1)}, "eta must be timezone-aware"),
        ({"eta": "tomorrow"}, "eta must be a datetime"),
        ({"countdown": -1}, "countdown must be a number of seconds .* from 0 to"),
        ({"countdown": 5, "eta": timezone.now()}, "eta or countdown, not both"),
    ],
)
def test_bad_options_are_refused_and_change_nothing(noop_type, row_counts, options, message):
    before = row_counts()
    with pytest.raises(InvalidParameter, match=message):
        atp.enqueue("tests.noop", **options)
    assert row_counts() == before


def test_eta_and_countdown_set_when_the_task_may_start(noop_type):
    eta = timezone.now() + datetime.timedelta(hours=2)
    assert Task.objects.get(pk=atp.enqueue("tests.noop", eta=eta).pk).not_before == eta
    delayed = Task.objects.get(pk=atp.enqueue("tests.noop", countdown=90).pk)
    assert delayed.not_before - delayed.enqueued == datetime.timedelta(seconds=90)


def test_a_type_declared_in_code_is_created_on_first_enqueue(db):
    Type.objects.filter(identifier="tests.declared").delete()
    instance = atp.enqueue("tests.declared")
    assert instance.type.handler == "tests.handlers.declared"
    assert instance.type.max_restarts == 1


def test_enqueue_many_writes_one_statement_per_table(noop_type):
    # Up to the database's batch size (SQLite binds at most 999 parameters in one
    # statement) the number of statements does not grow with the number of tasks.
    atp.enqueue_many("tests.noop", [{"n": n} for n in range(2)])  # the type is read
    with CaptureQueriesContext(connection) as few:
        atp.enqueue_many("tests.noop", [{"n": n} for n in range(3)])
    with CaptureQueriesContext(connection) as many:
        atp.enqueue_many("tests.noop", [{"n": n} for n in range(30)])
    # SQLite: savepoint, the write lock taken (atp.db.take_write_lock), the type as read,
    # 4 inserts, release (the ORM form: type, clock too). PostgreSQL: savepoint, one
    # statement for the 4 tables, NOTIFY, release.
    assert len(many) == len(few) <= (4 if engine_of_the_database().name == "postgresql" else 10)
    # More tasks than SQLite binds in one statement: each still gets its own row and inputs.
    instances = atp.enqueue_many("tests.noop", [{"n": n} for n in range(4000)], priority=2)
    assert len({instance.pk for instance in instances}) == 4000
    assert Task.objects.filter(priority=2).count() == 4000
    for n in (7, 1700, 3999):
        stored = Instance.objects.get(pk=instances[n].pk)
        assert (stored.identifier, stored.load_inputs()) == (instances[n].identifier, {"n": n})
        assert Task.objects.get(pk=stored.pk).identifier == stored.identifier
    assert LogRecord.objects.filter(status=Status.ACCEPTED).count() == 2 + 3 + 30 + 4000


#: Inputs whose text a statement must carry as it is: quotes, backslashes, control
#: characters, text that reads as JSON, letters beyond ASCII and beyond 16 bits.
AWKWARD = ["", "'\"", "a\\b\\", "\x01\n\t\x7f", "null", "[1, 2]", '{"k": "v"}', "café",
           "\u2028\u00a0", "\U0001f600 \U00020000"]


def test_enqueue_many_stores_every_character_as_given(noop_type):
    """The engines carry a batch's identifiers and inputs in one parameter (a JSON
    array, on SQLite and MariaDB/MySQL): what it reads back is what was given."""
    inputs = [{"text": text, "n": n} for n, text in enumerate(AWKWARD)]
    enqueued = atp.enqueue_many("tests.noop", inputs)
    assert [Instance.objects.get(pk=task.pk).load_inputs() for task in enqueued] == inputs
    assert [Task.objects.get(pk=task.pk).identifier for task in enqueued] == [
        task.identifier for task in enqueued]


def test_without_returning_each_instance_is_written_with_its_own_key(noop_type, monkeypatch):
    """MySQL has no ``RETURNING``, and under ``innodb_autoinc_lock_mode = 2`` (its
    default) the keys of one INSERT of many rows need not be consecutive: the mysql
    engine then writes the instances one statement each, the key of each read from the
    driver, and the rest of the batch as on MariaDB (run here, on MariaDB, as MySQL)."""
    if engine_of_the_database().name != "mysql":
        pytest.skip("the mysql engine's")
    monkeypatch.setattr(type(connection.features), "can_return_rows_from_bulk_insert", False)
    atp.enqueue("tests.noop")  # another task's key in between
    with CaptureQueriesContext(connection) as queries:
        enqueued = atp.enqueue_many("tests.noop", [{"n": n} for n in range(5)])
    assert sum("RETURNING" in query["sql"] for query in queries) == 0
    assert sum(query["sql"].startswith("INSERT INTO atp_instance") for query in queries) == 5
    for n, task in enumerate(enqueued):
        stored = Instance.objects.get(pk=task.pk)
        assert (stored.identifier, stored.load_inputs()) == (task.identifier, {"n": n})
        assert Task.objects.get(pk=task.pk).identifier == task.identifier
        assert LogRecord.objects.filter(instance=stored, status=Status.ACCEPTED).count() == 1


@pytest.mark.parametrize("engine_choice", ["auto", "orm"])
def test_enqueue_many_of_large_inputs_sends_no_statement_a_server_refuses(
        noop_type, settings, engine_choice):
    """MariaDB refuses a statement above its ``max_allowed_packet`` (16 MB by default):
    its engine and the portable one write 18 MB of inputs in several INSERTs, each well
    under that."""
    from atp.engine.engines import engine

    settings.ATP_ENGINE = engine_choice
    if engine().name in ("postgresql", "sqlite"):
        pytest.skip("PostgreSQL and SQLite take statements of any such size")
    payload = {"text": "x" * 150_000}
    with CaptureQueriesContext(connection) as queries:
        instances = atp.enqueue_many("tests.noop", [payload] * 120)
    assert max(len(query["sql"]) for query in queries) < 2 * 1024 * 1024
    assert Instance.objects.get(pk=instances[-1].pk).load_inputs() == payload
    assert Inputs.objects.count() == 120


def test_enqueue_many_writes_all_or_nothing(noop_type, row_counts):
    before = row_counts()
    with pytest.raises(InputsNotSerializable, match=r"inputs\['bad'\]"):
        atp.enqueue_many("tests.noop", [{"ok": 1}, {"bad": object()}])
    assert row_counts() == before
    assert atp.enqueue_many("tests.noop", []) == []


def test_enqueue_many_is_atomic_with_the_callers_transaction(noop_type, row_counts):
    before = row_counts()
    with pytest.raises(Boom), transaction.atomic():
        atp.enqueue_many("tests.noop", [{}, {}, {}])
        raise Boom
    assert row_counts() == before


def test_a_task_built_by_the_factory_went_through_the_verbs(noop_type):
    instance = TaskFactory(type=noop_type, status=Status.FINISHED)
    history = list(LogRecord.objects.filter(instance=instance).values_list("status", flat=True))
    assert history == [Status.ACCEPTED, Status.SCHEDULED, Status.RUNNING, Status.FINISHED]
    assert drive(atp.enqueue(noop_type), Status.ACCEPTED).status == Status.ACCEPTED
    assert engine.enqueue is atp.enqueue


@pytest.fixture
def listener(postgres_only):
    import psycopg

    from atp.engine.notify import QUEUE_CHANNEL

    settings = connection.settings_dict
    conn = psycopg.connect(
        host=settings["HOST"], port=settings["PORT"] or 5432, user=settings["USER"],
        dbname=settings["NAME"], autocommit=True,
    )
    conn.execute(f"LISTEN {QUEUE_CHANNEL}")
    yield lambda: list(conn.notifies(timeout=0.5, stop_after=1))
    conn.close()


@pytest.mark.django_db(transaction=True)
def test_listening_daemons_are_notified_when_an_enqueue_commits(noop_type, listener):
    with transaction.atomic():
        atp.enqueue("tests.noop")
    assert len(listener()) == 1


@pytest.mark.django_db(transaction=True)
def test_no_notification_for_a_rollback_or_a_delayed_task(noop_type, listener):
    with pytest.raises(Boom), transaction.atomic():
        atp.enqueue("tests.noop")
        raise Boom
    atp.enqueue("tests.noop", countdown=60)
    assert listener() == []


@pytest.mark.parametrize("count", [1, 3])
def test_the_tasks_enqueue_returns_are_as_stored(noop_type, count):
    """They are built without ``Model.__init__``: each must still be the row as stored,
    with its type and a state of its own."""
    enqueued = (atp.enqueue_many("tests.noop", [{"n": n} for n in range(count)], priority=4)
                if count > 1 else [atp.enqueue("tests.noop", {"n": 0}, priority=4)])
    fields = [field.attname for field in Instance._meta.concrete_fields]
    for instance in enqueued:
        stored = Instance.objects.get(pk=instance.pk)
        assert {name: getattr(instance, name) for name in fields} == {
            name: getattr(stored, name) for name in fields}
        assert not instance._state.adding and instance._state.db == stored._state.db
    first, *others = enqueued
    with CaptureQueriesContext(connection) as queries:
        assert first.type.identifier == "tests.noop"
    assert len(queries) == 0
    first.progress_message = "changed"
    first.save(update_fields=["progress_message"])  # an update, not an insert
    assert Instance.objects.get(pk=first.pk).progress_message == "changed"
    assert all(other._state is not first._state for other in others)
    assert all(other.progress_message == "" for other in others)


def test_enqueue_on_commit_queues_the_task_only_once_the_transaction_commits(
        noop_type, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with transaction.atomic():
            assert atp.enqueue_on_commit("tests.noop", {"n": 1}, identifier="after") is None
            assert not Instance.objects.filter(identifier="after").exists()
    assert callbacks  # ours (and, on SQLite, the doorbell's ring after the enqueue)
    task = Instance.objects.get(identifier="after")
    assert task.load_inputs() == {"n": 1}


def test_enqueue_on_commit_queues_nothing_when_the_transaction_rolls_back(
        noop_type, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks, pytest.raises(Boom):
        with transaction.atomic():
            atp.enqueue_on_commit("tests.noop", identifier="never")
            raise Boom
    assert callbacks == [] and not Instance.objects.filter(identifier="never").exists()


@pytest.mark.parametrize("call, error", [
    (lambda: atp.enqueue_on_commit("tests.nothing"), TaskTypeNotFound),
    (lambda: atp.enqueue_on_commit("tests.noop", {"x": object()}), InputsNotSerializable),
    (lambda: atp.enqueue_on_commit("tests.noop", priority="high"), InvalidParameter),
])
def test_enqueue_on_commit_refuses_bad_input_at_once(noop_type, call, error,
                                                     django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks, pytest.raises(error):
        call()
    assert callbacks == []
