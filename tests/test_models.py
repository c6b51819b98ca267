import datetime

import pytest
from django.db import connection
from django.db.models import Count

import atp
from atp.models import Inputs, Instance, Response
from atp.states import LIVE, Status
from tests.bulk import unchecked_references
from tests.engine.test_claim_plan import explain_hot_claim, picked_nodes
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


def test_progress_fraction_is_clamped_and_unknown_without_a_total():
    assert Instance(progress_done=5, progress_total=10).progress_fraction == 0.5
    assert Instance(progress_done=12, progress_total=10).progress_fraction == 1.0
    assert Instance(progress_done=5).progress_fraction is None
    assert Instance(progress_done=5, progress_total=0).progress_fraction is None


def test_duration_runs_from_start_to_end(noop_type):
    instance = TaskFactory(type=noop_type, status=Status.FINISHED)
    assert instance.duration == instance.finished - instance.started
    assert instance.is_terminal and not instance.is_live and not instance.is_in_flight
    assert TaskFactory(type=noop_type).duration is None


def test_a_pickled_input_tells_its_size_without_being_unpickled(pickle_enabled, db):
    atp.register_task_type("tests.pickled", "tests.handlers.echo", input_format="pickle")
    instance = atp.enqueue("tests.pickled", b"x" * 1000)
    assert 1000 < Inputs.objects.get(pk=instance.pk).size < 1100


def test_models_read_well_in_lists(noop_type, daemon):
    instance = atp.enqueue("tests.noop", identifier="job-7")
    assert str(instance) == f"#{instance.pk} job-7"
    assert str(noop_type) == "tests.noop"
    assert str(Response(instance=instance)) == f"response of task #{instance.pk}"


@pytest.fixture
def million_ended_tasks(postgres_only, noop_type):
    """1,000,000 finished tasks and 10,000 waiting ones, with fresh planner statistics."""
    with connection.cursor() as cursor, unchecked_references(cursor):
        cursor.execute(
            """
            INSERT INTO atp_instance (type_id, identifier, named, status, priority, attempt,
                                      restarts, retries, snoozes, progress_message, created, updated,
                                      started, finished)
            SELECT %s, 'ended-' || n, false, 'FINISHED', 0, 1, 0, 0, 0, '', now(), now(), now(),
                   now()
            FROM generate_series(1, 1000000) AS n
            """,
            [noop_type.pk],
        )
    atp.enqueue_many("tests.noop", [{}] * 10_000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE atp_instance")
        cursor.execute("ANALYZE atp_task")
    return noop_type


@pytest.mark.slow
def test_queue_queries_stay_index_scans_with_a_million_ended_tasks(million_ended_tasks, daemon):
    # The claim the daemon runs, as it runs it.
    picked = picked_nodes(explain_hot_claim(daemon, [million_ended_tasks.pk]))
    assert [node.get("Index Name") for node in picked if "Index" in node["Node Type"]] == [
        "atp_task_claim_idx"], picked
    assert not {"Seq Scan", "Sort", "Bitmap Heap Scan"} & {node["Node Type"] for node in picked}

    live_counts = (
        Instance.objects.filter(status__in=LIVE).values("type", "status")
        .annotate(count=Count("pk")).order_by()
    )
    plan = live_counts.explain()
    assert "atp_instance_live_idx" in plan, plan
    assert "Seq Scan" not in plan, plan
    assert list(live_counts) == [{"type": million_ended_tasks.pk, "status": Status.ACCEPTED, "count": 10_000}]

    # What an operator looks into first: a type's failed tasks, newest first.
    failed = Instance.objects.filter(type=million_ended_tasks, status=Status.FAILED)
    plan = failed.order_by("-id")[:50].explain()
    assert "atp_instance_failed_idx" in plan, plan
    assert "Seq Scan" not in plan, plan


def test_finished_tasks_keep_their_timestamps_in_order(noop_type):
    instance = TaskFactory(type=noop_type, status=Status.FINISHED)
    assert instance.created <= instance.started <= instance.finished
    assert instance.finished - instance.created < datetime.timedelta(minutes=1)
