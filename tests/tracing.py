"""OpenTelemetry's SDK for the tests: spans kept in memory, or written to a file by a
daemon started with ``ATP_TEST_SPANS_FILE`` (see tests/settings.py)."""

import json
import os

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult


def as_dict(span):
    """What a test checks of a finished span, its ids as hexadecimal text."""
    parent = span.parent
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{span.context.trace_id:032x}",
        "span_id": f"{span.context.span_id:016x}",
        "parent_id": f"{parent.span_id:016x}" if parent else None,
        "links": [f"{link.context.span_id:016x}" for link in span.links],
        "attributes": dict(span.attributes),
        "status": span.status.status_code.name,
        "events": [event.name for event in span.events],
        "pid": os.getpid(),
    }


class FileExporter(SpanExporter):
    """Append each span to a file as a line of JSON, whichever process ends it (a
    daemon's supervisor and its forked workers)."""

    def __init__(self, path):
        self.path = path

    def export(self, spans):
        with open(self.path, "a") as out:
            for span in spans:
                out.write(json.dumps(as_dict(span)) + "\n")
        return SpanExportResult.SUCCESS


def export_spans_to(path):
    """Trace this process (and the processes it forks) into ``path``."""
    from opentelemetry import trace

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter(path)))
    trace.set_tracer_provider(provider)
