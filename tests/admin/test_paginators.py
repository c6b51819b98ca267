import pytest
from django.db import connection
from django.db.models.expressions import RawSQL

import atp
from atp.admin import paginators
from atp.admin.paginators import EstimatedCountPaginator
from atp.models import Instance

pytestmark = pytest.mark.django_db


def test_a_quick_count_is_exact(noop_type):
    atp.enqueue_many("tests.noop", [{}] * 12)
    assert EstimatedCountPaginator(Instance.objects.order_by("-pk"), 5).count == 12


def test_a_slow_count_gives_way_to_the_planners_estimate(postgres_only, noop_type, monkeypatch):
    atp.enqueue_many("tests.noop", [{}] * 12)
    monkeypatch.setattr(paginators, "COUNT_BUDGET_MILLISECONDS", 20)
    slow = Instance.objects.filter(pk__in=RawSQL("SELECT id FROM atp_instance, pg_sleep(0.2)", []))
    count = EstimatedCountPaginator(slow.order_by("-pk"), 5).count
    assert isinstance(count, int) and count >= 0
    with connection.cursor() as cursor:  # the time limit did not outlive the count
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone()[0] == "0"
        cursor.execute("SELECT pg_sleep(0.05)")


def test_a_projects_own_time_limit_is_kept_after_a_count(postgres_only, noop_type):
    atp.enqueue_many("tests.noop", [{}] * 3)
    with connection.cursor() as cursor:
        cursor.execute("SET statement_timeout = '7s'")
        try:
            assert EstimatedCountPaginator(Instance.objects.order_by("-pk"), 5).count == 3
            cursor.execute("SHOW statement_timeout")
            assert cursor.fetchone()[0] == "7s"
        finally:
            cursor.execute("SET statement_timeout TO DEFAULT")


def test_only_the_first_pages_are_offered(noop_type, monkeypatch):
    monkeypatch.setattr(paginators, "MAX_PAGES", 3)
    atp.enqueue_many("tests.noop", [{}] * 40)
    paginator = EstimatedCountPaginator(Instance.objects.order_by("-pk"), 5)
    assert paginator.count == 40 and paginator.num_pages == 3
    assert list(paginator.page_range) == [1, 2, 3]


def test_a_list_the_planner_expects_to_be_long_is_not_counted(postgres_only, noop_type, monkeypatch):
    from django.test.utils import CaptureQueriesContext

    atp.enqueue_many("tests.noop", [{}] * 12)
    monkeypatch.setattr(paginators, "EXACT_COUNT_UP_TO", -1)
    with CaptureQueriesContext(connection) as queries:
        count = EstimatedCountPaginator(Instance.objects.order_by("-pk"), 5).count
    assert isinstance(count, int) and count >= 0
    assert not any("COUNT(" in q["sql"].upper() for q in queries.captured_queries)


def test_a_list_that_can_match_nothing_counts_none(noop_type):
    atp.enqueue("tests.noop", {})
    # What the task list's search gives for a term no identifier can be.
    assert EstimatedCountPaginator(Instance.objects.order_by("pk").none(), 50).count == 0
