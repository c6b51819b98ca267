"""OpenTelemetry spans and metrics from enqueue to run, when the project traces.

atp needs no OpenTelemetry; with ``opentelemetry-api`` installed and a tracer or meter
provider configured by the project (its SDK, or ``opentelemetry-instrument``), it
reports, by OpenTelemetry's messaging conventions (``messaging.system`` ``atp``, the
task type as ``messaging.destination.name``, the task's id as ``messaging.message.id``):

- an enqueue: a PRODUCER span ``send <type>`` (one for a batch of ``enqueue_many``,
  with ``messaging.batch.message_count``) and the ``messaging.client.sent.messages``
  counter. Its context is stored beside each task (``TraceContext``: what the
  project's propagators inject, ``traceparent`` for W3C Trace Context);
- a run, in the worker: a CONSUMER span ``process <type>``, a child of the enqueue's
  span and linked to it, so that one trace goes from the request that enqueued to the
  handler and whatever it calls; a handler that raises ends it with an error
  (``error.type``, the exception recorded). The ``messaging.process.duration``
  histogram and the ``messaging.client.consumed.messages`` counter count the runs.

Without a configured provider nothing is written or read, and atp does not even import
OpenTelemetry: a project that configured one has imported it.
"""

import logging
import sys
import time
from contextlib import contextmanager, nullcontext

logger = logging.getLogger(__name__)

SYSTEM = "atp"
_SCOPE = "atp"
otel_trace = otel_metrics = propagate = None  # imported once the project has


def tracing():
    """Tell whether the project configured a tracer provider (a global one, not the API's
    placeholder)."""
    global otel_trace, propagate
    if otel_trace is None:
        if "opentelemetry.trace" not in sys.modules:
            return False
        from opentelemetry import propagate
        from opentelemetry import trace as otel_trace
    return not isinstance(otel_trace.get_tracer_provider(),
                          (otel_trace.ProxyTracerProvider, otel_trace.NoOpTracerProvider))


def _measuring():
    global otel_metrics
    if otel_metrics is None:
        if "opentelemetry.metrics" not in sys.modules:
            return False
        from opentelemetry import metrics as otel_metrics
    # The API's own providers (its placeholder and its no-op) are defined in the API.
    return not type(otel_metrics.get_meter_provider()).__module__.startswith(
        "opentelemetry.metrics")


class _Instruments:
    """The meters' instruments, made once per meter provider."""

    provider = None

    @classmethod
    def of_provider(cls):
        provider = otel_metrics.get_meter_provider()
        if cls.provider is not provider:
            meter = provider.get_meter(_SCOPE)
            cls.sent = meter.create_counter(
                "messaging.client.sent.messages", unit="{message}",
                description="Tasks enqueued.")
            cls.consumed = meter.create_counter(
                "messaging.client.consumed.messages", unit="{message}",
                description="Tasks a worker began to run.")
            cls.process_duration = meter.create_histogram(
                "messaging.process.duration", unit="s",
                description="How long a handler ran, one attempt.")
            cls.provider = provider
        return cls


def _attributes(type_identifier, operation):
    """The conventions' attributes of an operation (``send``, ``process``) on a type; atp's
    own name for each operation is the conventions' type of it."""
    return {
        "messaging.system": SYSTEM,
        "messaging.destination.name": type_identifier,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
    }


def sending(type_identifier, count):
    """Wrap an enqueue of ``count`` tasks of ``type_identifier``: a context manager whose
    value is a function to call with the tasks written, which stores the span's context
    beside each."""
    traced, measured = tracing(), _measuring()
    if not (traced or measured):
        return _NOT_SENDING  # the cheapest: this is on every enqueue's path
    return _sending(type_identifier, count, traced, measured)


def processing(instance, attempt):
    """Wrap a handler's run of attempt ``attempt`` of ``instance``: a CONSUMER span in
    the trace of its enqueue, and the run metrics. An exception is recorded, then
    raised on."""
    traced, measured = tracing(), _measuring()
    if not (traced or measured):
        return _NOT_PROCESSING
    return _processing(instance, attempt, traced, measured)


@contextmanager
def _sending(type_identifier, count, traced, measured):
    attributes = _attributes(type_identifier, "send")
    if count > 1:
        attributes["messaging.batch.message_count"] = count
    span = (otel_trace.get_tracer(_SCOPE).start_as_current_span(
        f"send {type_identifier}", kind=otel_trace.SpanKind.PRODUCER, attributes=attributes)
        if traced else nullcontext())
    with span as current, _together() if traced else nullcontext():
        def written(instances):
            if traced and len(instances) == 1:
                current.set_attribute("messaging.message.id", str(instances[0].pk))
            if traced:
                _store_context(instances)
            if measured:
                _Instruments.of_provider().sent.add(
                    len(instances), _attributes(type_identifier, "send"))

        yield written


def _together():
    """A transaction (a savepoint inside the caller's) that commits the tasks and their
    trace contexts at once: a task committed alone could be claimed and run before its
    context is written, and its run would start a trace of its own."""
    from django.db import transaction

    from atp.engine.base import database

    return transaction.atomic(using=database())


def _nothing(instances):
    pass


_NOT_SENDING = nullcontext(_nothing)
_NOT_PROCESSING = nullcontext()


def _store_context(instances):
    from atp.models import TraceContext

    carrier = {}
    propagate.inject(carrier)
    if not carrier or not instances:
        return
    TraceContext.objects.bulk_create(
        [TraceContext(instance_id=instance.pk, carrier=carrier) for instance in instances])


def _stored_context(pk):
    """Return the context of the task's enqueue, or None. Tracing never fails a task: a
    context that cannot be read starts a trace of its own (logged)."""
    from atp.models import TraceContext

    try:
        carrier = TraceContext.objects.filter(instance_id=pk).values_list(
            "carrier", flat=True).first()
        return propagate.extract(carrier) if carrier else None
    except Exception:
        logger.warning("task id=%s: the trace context of its enqueue cannot be read", pk,
                       exc_info=True)
        return None


@contextmanager
def _processing(instance, attempt, traced, measured):
    type_identifier = instance.type.identifier
    attributes = _attributes(type_identifier, "process")
    attributes.update({"messaging.message.id": str(instance.pk), "atp.task.attempt": attempt})
    if traced:
        parent = _stored_context(instance.pk)
        links = []
        if parent is not None:
            enqueued = otel_trace.get_current_span(parent).get_span_context()
            if enqueued.is_valid:
                links = [otel_trace.Link(enqueued)]
        span = otel_trace.get_tracer(_SCOPE).start_as_current_span(
            f"process {type_identifier}", context=parent, kind=otel_trace.SpanKind.CONSUMER,
            attributes=attributes, links=links, record_exception=False,
            set_status_on_exception=False)
    else:
        span = nullcontext()
    began = time.monotonic()
    error = None
    try:
        with span as current:
            try:
                yield
            except BaseException as exc:
                error = type(exc).__qualname__
                if traced:
                    current.record_exception(exc)
                    current.set_attribute("error.type", error)
                    current.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, str(exc)))
                raise
    finally:
        if measured:
            instruments = _Instruments.of_provider()
            counted = _attributes(type_identifier, "process")
            instruments.consumed.add(1, counted)
            if error is not None:
                counted["error.type"] = error
            instruments.process_duration.record(time.monotonic() - began, counted)
