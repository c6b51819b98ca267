import datetime

import pytest
from django.http import QueryDict
from django.utils import timezone

import atp
from atp import selection
from atp.daemon.execution import run_task
from atp.models import Instance
from atp.selection import BadFilter, TaskFilter
from atp.states import Status
from tests.factories import TaskFactory, claim_exactly

pytestmark = pytest.mark.django_db


def chosen(**fields):
    query = QueryDict(mutable=True)
    query.update(fields)
    return sorted(TaskFilter.from_query(query).apply(Instance.objects.all())
                  .values_list("pk", flat=True))


def test_search_finds_a_number_an_identifier_prefix_and_a_type(noop_type):
    echo = atp.register_task_type("tests.echo", "tests.handlers.echo")
    report = TaskFactory(type=noop_type, identifier="report-2026-11")
    other = TaskFactory(type=noop_type, identifier="Report-upper")
    echoed = TaskFactory(type=echo, identifier="x1")
    assert chosen(q="report-") == [report.pk]
    assert chosen(q="Rep") == [other.pk]  # identifiers are case-sensitive
    assert chosen(q=str(echoed.pk)) == [echoed.pk]
    assert chosen(q="tests.echo") == [echoed.pk]
    assert chosen(q="nothing") == []


def test_the_failure_text_is_searched_in_the_latest_entries_only(noop_type, daemon, monkeypatch):
    atp.register_task_type("tests.fail", "tests.handlers.fail", max_restarts=0)
    tasks = []
    for message in ("disk Full on /var", "timeout"):
        task = claim_exactly(atp.enqueue("tests.fail", {"message": message}), daemon)
        run_task(task.pk, task.attempt, task.type.handler)
        tasks.append(task.pk)
    assert chosen(error="full") == [tasks[0]]
    assert chosen(error="TIMEOUT", status="FAILED") == [tasks[1]]
    assert chosen(error="full", status="FINISHED") == []
    monkeypatch.setattr(selection, "ERROR_SEARCH_ENTRIES", 2)  # older failures drop out
    assert chosen(error="full") == []


def test_the_time_range_reads_local_times(noop_type, settings):
    settings.TIME_ZONE = "Europe/Paris"
    task = TaskFactory(type=noop_type)
    created = timezone.localtime(task.created).replace(tzinfo=None)
    before, after = (created - datetime.timedelta(minutes=1)).isoformat(), \
        (created + datetime.timedelta(minutes=1)).isoformat()
    assert chosen(since=before, until=after) == [task.pk]
    assert chosen(since=after) == []
    assert chosen(until=before) == []


@pytest.mark.parametrize("fields, error", [
    ({"status": "DONE"}, "unknown state 'DONE'"),
    ({"since": "2026-13-45T00:00"}, "since is not a date and time"),
    ({"until": "soon"}, "until is not a date and time"),
    ({"q": "x" * 501}, "q is longer than 500 characters"),
    ({"error": "\x00"}, "error holds a NUL character"),
])
def test_a_bad_filter_says_what_is_wrong(fields, error):
    with pytest.raises(BadFilter, match=error):
        chosen(**fields)


def test_a_filter_describes_itself_and_round_trips(noop_type):
    query = QueryDict("type=tests.noop&status=FAILED&q=&error=boom")
    task_filter = TaskFilter.from_query(query)
    assert task_filter.as_query() == {"type": "tests.noop", "status": "FAILED", "error": "boom"}
    assert task_filter.describe() == "type 'tests.noop', state 'FAILED', failure text with 'boom'"
    assert TaskFilter().describe() == "no filter: every task"
    assert Status.FAILED in Status.values


def test_an_identifier_prefix_reads_the_identifier_index(noop_type):
    from django.db import connection

    atp.enqueue_many("tests.noop", [{}] * 50)
    TaskFactory(type=noop_type, identifier="report-1")
    if connection.vendor == "postgresql":  # a table this small is read whole otherwise
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")
    plan = selection.search(Instance.objects.all(), "report-").explain()
    assert "atp_instance_identifier_idx" in plan
