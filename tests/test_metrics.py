import datetime

import pytest
from django.db.models import F
from prometheus_client.parser import text_string_to_metric_families

import atp
from atp import metrics
from atp.models import Instance, Task
from atp.states import Status
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db

SECOND = datetime.timedelta(seconds=1)


def scraped(accept=None):
    """Return ``({name: type}, {(sample, ((label, value), ...)): value})`` of a scrape."""
    body, content_type = metrics.exposition(accept)
    assert content_type.startswith("text/plain")
    families = list(text_string_to_metric_families(body.decode()))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}
    return {f.name: f.type for f in families}, samples


def took(instance, *, waited, ran):
    """Make ``instance`` (ended) look as if it waited ``waited`` s and then ran ``ran`` s."""
    Instance.objects.filter(pk=instance.pk).update(
        started=F("finished") - ran * SECOND, created=F("finished") - (ran + waited) * SECOND)


def test_a_scrape_counts_the_tasks_the_test_made(noop_type, daemon):
    daemon.serves.add(noop_type)
    atp.register_pull_type("tests.pull")
    atp.enqueue("tests.pull")
    oldest = atp.enqueue("tests.noop")
    atp.enqueue("tests.noop")
    atp.enqueue("tests.noop", countdown=600)
    Task.objects.filter(pk=oldest.pk).update(not_before=F("not_before") - 100 * SECOND)
    TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)
    took(TaskFactory(type=noop_type, status=Status.FINISHED, daemon=daemon), waited=40, ran=2)
    took(TaskFactory(type=noop_type, status=Status.FAILED, daemon=daemon), waited=0.02, ran=0.2)
    TaskFactory(type=noop_type, status=Status.CANCELLED)  # before it started: no times
    long_ago = TaskFactory(type=noop_type, status=Status.FINISHED, daemon=daemon)
    Instance.objects.filter(pk=long_ago.pk).update(finished=F("finished") - 3600 * SECOND)

    types, samples = scraped()

    def value(name, **labels):
        return samples[(name, tuple(sorted(labels.items())))]

    noop, pull = {"type": "tests.noop"}, {"type": "tests.pull"}
    assert types["atp_tasks"] == "gauge" and types["atp_task_run_seconds"] == "histogram"
    assert [value("atp_tasks", state=s, **noop) for s in ("ACCEPTED", "SCHEDULED", "RUNNING", "PAUSED")] == [3, 0, 1, 0]
    assert [value("atp_tasks_ended", state=s, **noop) for s in ("FINISHED", "FAILED", "CANCELLED")] == [1, 1, 1]
    assert value("atp_metrics_window_seconds") == 300
    assert value("atp_queue_depth", **noop) == 2 and value("atp_queue_delayed", **noop) == 1
    assert value("atp_pull_queue_depth", **pull) == 1 and ("atp_queue_depth", (("type", "tests.pull"),)) not in samples
    assert 100 <= value("atp_oldest_wait_seconds", **noop) < 1000
    assert value("atp_oldest_wait_seconds", **pull) < 100
    # The finished task ran 2 s after waiting 40 s; the failed one ran 0.2 s; the
    # cancelled one never started; the one that ended an hour ago is out of the window.
    assert value("atp_task_run_seconds_bucket", le="0.1", **noop) == 0
    assert value("atp_task_run_seconds_bucket", le="0.5", **noop) == 1
    assert value("atp_task_run_seconds_bucket", le="5.0", **noop) == 2
    assert value("atp_task_run_seconds_bucket", le="+Inf", **noop) == 2
    assert value("atp_task_run_seconds_gcount", **noop) == 2
    assert value("atp_task_run_seconds_gsum", **noop) == pytest.approx(2.2)
    assert value("atp_task_wait_seconds_bucket", le="0.05", **noop) == 1
    assert value("atp_task_wait_seconds_bucket", le="30.0", **noop) == 1
    assert value("atp_task_wait_seconds_bucket", le="60.0", **noop) == 2
    assert value("atp_task_wait_seconds_gsum", **noop) == pytest.approx(40.02)
    assert value("atp_daemons_live") == 1 and value("atp_workers_live") == 1
    assert value("atp_type_daemons_live", **noop) == 1 and value("atp_type_daemons_live", **pull) == 0
    assert value("atp_type_paused", **noop) == 0


def test_a_type_without_tasks_has_its_series_at_zero(noop_type, settings):
    settings.ATP_METRICS_WINDOW_SECONDS = 60
    _, samples = scraped()
    noop = (("type", "tests.noop"),)
    assert samples[("atp_queue_depth", noop)] == 0
    assert samples[("atp_oldest_wait_seconds", noop)] == 0
    assert samples[("atp_task_run_seconds_bucket", (("le", "+Inf"), *noop))] == 0
    assert samples[("atp_tasks_ended", (("state", "FAILED"), *noop))] == 0
    assert samples[("atp_metrics_window_seconds", ())] == 60
    assert samples[("atp_daemons_live", ())] == 0


def test_openmetrics_is_served_to_a_scraper_that_asks_for_it(noop_type):
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse

    body, content_type = metrics.exposition("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    families = {f.name: f.type for f in parse(body.decode())}
    assert families["atp_task_run_seconds"] == "gaugehistogram"
    assert families["atp_tasks"] == "gauge"


def test_the_collector_names_its_families_without_reading_the_database(django_assert_num_queries):
    with django_assert_num_queries(0):
        names = {family.name for family in metrics.Collector().describe()}
    assert {"atp_tasks", "atp_queue_depth", "atp_daemons_live"} <= names


def test_a_scrape_costs_the_same_queries_however_many_types(noop_type, django_assert_max_num_queries):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as one_type:
        scraped()
    for k in range(10):
        atp.register_task_type(f"tests.more{k}", "tests.handlers.noop")
        atp.enqueue(f"tests.more{k}")
    with django_assert_max_num_queries(len(one_type)):
        scraped()
