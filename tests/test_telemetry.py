"""OpenTelemetry: one trace from the code that enqueues to the handler that runs, by the
messaging conventions, when the project configured a provider; nothing otherwise."""

import json
import signal
import subprocess
import sys

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import atp
from atp.daemon.execution import run_task
from atp.exceptions import TaskTypeNotFound
from atp.models import Instance, TraceContext
from atp.states import Status
from tests.factories import claim_exactly
from tests.processes import environment, wait_until
from tests.tracing import as_dict

pytestmark = pytest.mark.django_db


@pytest.fixture
def tracer_provider(monkeypatch):
    """The project's tracer provider, as its settings would configure it (here for this
    test alone: the API lets a process set its global one once)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    provider.finished = lambda: {span.name: as_dict(span) for span in exporter.get_finished_spans()}
    return provider


@pytest.fixture
def meter_provider(monkeypatch):
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    monkeypatch.setattr(metrics, "get_meter_provider", lambda: provider)

    def points():
        found = {}
        data = reader.get_metrics_data()
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found[metric.name] = [(dict(p.attributes), getattr(p, "value", None)
                                           if hasattr(p, "value") else p.count)
                                          for p in metric.data.data_points]
        return found

    provider.points = points
    return provider


def test_an_enqueue_and_its_run_are_one_trace_from_the_request(tracer_provider, daemon):
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    with tracer_provider.get_tracer("the project").start_as_current_span("POST /orders"):
        task = atp.enqueue("tests.echo", {"order": 7})
    claimed = claim_exactly(task, daemon)
    run_task(claimed.pk, claimed.attempt, claimed.type.handler, "host:1")

    spans = tracer_provider.finished()
    request, send, process = spans["POST /orders"], spans["send tests.echo"], spans[
        "process tests.echo"]
    assert send["kind"] == "PRODUCER" and send["parent_id"] == request["span_id"]
    assert send["attributes"] == {
        "messaging.system": "atp", "messaging.destination.name": "tests.echo",
        "messaging.operation.type": "send", "messaging.operation.name": "send",
        "messaging.message.id": str(task.pk)}
    # The run is in the request's trace, a child of the enqueue, and linked to it.
    assert process["kind"] == "CONSUMER" and process["trace_id"] == request["trace_id"]
    assert process["parent_id"] == send["span_id"] and process["links"] == [send["span_id"]]
    assert process["attributes"] == {
        "messaging.system": "atp", "messaging.destination.name": "tests.echo",
        "messaging.operation.type": "process", "messaging.operation.name": "process",
        "messaging.message.id": str(task.pk), "atp.task.attempt": 1}
    assert process["status"] == "UNSET"
    assert Instance.objects.get(pk=task.pk).status == Status.FINISHED


def test_a_handler_that_raises_ends_its_span_in_error_and_is_counted(
        tracer_provider, meter_provider, daemon):
    atp.register_task_type("tests.fail", "tests.handlers.fail")
    task = claim_exactly(atp.enqueue("tests.fail", {"message": "broke"}), daemon)
    run_task(task.pk, task.attempt, task.type.handler)

    process = tracer_provider.finished()["process tests.fail"]
    assert process["status"] == "ERROR" and process["events"] == ["exception"]
    assert process["attributes"]["error.type"] == "ValueError"
    assert Instance.objects.get(pk=task.pk).status == Status.FAILED  # atp's outcome as before
    points = meter_provider.points()
    common = {"messaging.system": "atp", "messaging.destination.name": "tests.fail"}
    assert points["messaging.client.sent.messages"] == [(
        {**common, "messaging.operation.type": "send", "messaging.operation.name": "send"}, 1)]
    processed = {**common, "messaging.operation.type": "process",
                 "messaging.operation.name": "process"}
    assert points["messaging.client.consumed.messages"] == [(processed, 1)]
    assert points["messaging.process.duration"] == [({**processed, "error.type": "ValueError"}, 1)]


def test_a_context_that_cannot_be_read_starts_a_trace_of_its_own_and_fails_nothing(
        tracer_provider, daemon, caplog):
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    task = atp.enqueue("tests.echo", {})
    TraceContext.objects.filter(instance_id=task.pk).update(carrier=["not", "a", "carrier"])
    claimed = claim_exactly(task, daemon)
    run_task(claimed.pk, claimed.attempt, claimed.type.handler)
    assert Instance.objects.get(pk=task.pk).status == Status.FINISHED
    spans = tracer_provider.finished()
    assert spans["process tests.echo"]["parent_id"] is None
    assert spans["process tests.echo"]["trace_id"] != spans["send tests.echo"]["trace_id"]
    assert "the trace context of its enqueue cannot be read" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_a_task_enqueued_outside_a_transaction_commits_with_its_trace_context(
        tracer_provider, noop_type, monkeypatch):
    """Interleaving: between the engine's write and the context's, another session looks
    for the task. Committed alone, a daemon could claim and run it with no context yet."""
    from django.db import connection

    from atp import telemetry

    seen = []
    store = telemetry._store_context

    def look_then_store(instances):
        other = connection.copy()
        try:
            with other.cursor() as cursor:
                cursor.execute(f"SELECT COUNT(*) FROM {Instance._meta.db_table} WHERE id = %s",
                               [instances[0].pk])
                seen.append(cursor.fetchone()[0])
        finally:
            other.close()
        store(instances)

    monkeypatch.setattr(telemetry, "_store_context", look_then_store)
    assert connection.get_autocommit()
    task = atp.enqueue(noop_type.identifier, {})
    assert seen == [0], "the task was committed before its trace context"
    assert TraceContext.objects.filter(instance_id=task.pk).exists()


def test_a_batch_is_one_send_span_whose_context_each_task_keeps(tracer_provider, noop_type):
    tasks = atp.enqueue_many(noop_type.identifier, [{}] * 3)
    send = tracer_provider.finished()[f"send {noop_type.identifier}"]
    assert send["attributes"]["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in send["attributes"]  # one for a single task only
    carriers = dict(TraceContext.objects.values_list("instance_id", "carrier"))
    assert sorted(carriers) == sorted(task.pk for task in tasks)
    assert {carrier["traceparent"].split("-")[1:3] == [send["trace_id"], send["span_id"]]
            for carrier in carriers.values()} == {True}
    # A purge takes the contexts with the tasks.
    for task in tasks:
        atp.cancel(task)
    assert atp.purge_finished(older_than=0) == 3
    assert not TraceContext.objects.exists()


def test_an_enqueue_that_fails_ends_its_span_in_error_and_keeps_nothing(tracer_provider):
    with pytest.raises(TaskTypeNotFound):
        atp.enqueue("tests.nobody", {})
    send = tracer_provider.finished()["send tests.nobody"]
    assert send["status"] == "ERROR" and send["events"] == ["exception"]
    assert not TraceContext.objects.exists()


def test_without_a_configured_provider_nothing_is_traced_or_stored(noop_type, daemon):
    # The API's placeholder provider, as in a project that installed OpenTelemetry but
    # configured no SDK.
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    task = claim_exactly(atp.enqueue(noop_type.identifier, {}), daemon)
    run_task(task.pk, task.attempt, task.type.handler)
    assert not TraceContext.objects.exists()
    assert Instance.objects.get(pk=task.pk).status == Status.FINISHED


def test_atp_does_not_import_opentelemetry_for_a_project_that_does_not():
    probe = ("import sys, django; django.setup(); "
             "import atp.engine.enqueue, atp.daemon.execution, atp.telemetry as t; "
             "assert not t.tracing(); "
             "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    result = subprocess.run([sys.executable, "-c", probe], env=environment(),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_daemons_worker_runs_the_task_in_the_trace_of_its_enqueue(
        tracer_provider, start_daemon, tmp_path):
    spans_file = tmp_path / "daemon-spans.jsonl"
    atp.register_task_type("tests.echo", "tests.handlers.echo")
    daemon = start_daemon("--workers", 1, ATP_TEST_SPANS_FILE=spans_file)
    with tracer_provider.get_tracer("the project").start_as_current_span("POST /orders"):
        task = atp.enqueue("tests.echo", {"order": 8})
    wait_until(lambda: Instance.objects.get(pk=task.pk).status == Status.FINISHED, timeout=30,
               message="the task finished", output=daemon.output)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0, daemon.output()

    send = tracer_provider.finished()["send tests.echo"]
    [process] = [span for span in map(json.loads, spans_file.read_text().splitlines())
                 if span["name"] == "process tests.echo"]
    assert process["trace_id"] == send["trace_id"] and process["parent_id"] == send["span_id"]
    assert process["attributes"]["messaging.message.id"] == str(task.pk)
    assert process["pid"] != daemon.pid  # a worker's, forked from the supervisor
