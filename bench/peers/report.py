"""The figures' arithmetic and the table: pure functions of the measured numbers."""

import statistics

#: The table's rows: (key in a system's figures, label, format). The end of a no-op body
#: comes microseconds after its start, and what "done" means past it differs from one
#: system to another: enqueue -> end is in the JSON, not in the table.
FIGURES = [
    ("drain_4", "drain, 4 workers (tasks/s)", "{:,.0f}"),
    ("drain_1", "drain, 1 worker (tasks/s)", "{:,.0f}"),
    ("start_p50", "enqueue → start p50, idle worker (ms)", "{:.1f}"),
    ("start_p99", "enqueue → start p99, idle worker (ms)", "{:.1f}"),
    ("enqueue_p50", "one enqueue p50 (ms)", "{:.2f}"),
    ("bulk_rate", "bulk enqueue (tasks/s)", "{:,.0f}"),
    ("stream_rate", "stream: ⅓ of its 4-worker drain (tasks/s)", "{:,.0f}"),
    ("stream_p50", "stream: wait p50 (ms)", "{:.1f}"),
    ("stream_p99", "stream: wait p99 (ms)", "{:.1f}"),
]


def quantiles(values):
    """Return the median and the 99th percentile of ``values`` (at least one)."""
    values = list(values)
    if len(values) == 1:
        return {"p50": values[0], "p99": values[0]}
    return {"p50": statistics.median(values),
            "p99": statistics.quantiles(values, n=100, method="inclusive")[98]}


def rate(count, first_start, last_end):
    """Return ``count`` tasks over the time from the first start to the last end."""
    return count / (last_end - first_start)


def ratio(value, reference):
    """Return ``value`` over ``reference``, or None when either is missing or zero."""
    if value is None or not reference:
        return None
    return value / reference


def cell(value, form, relative=None):
    """Return a table cell: the figure, and its ratio to the reference's when given."""
    if value is None:
        return "—"
    shown = form.format(value)
    return shown if relative is None else f"{shown} ({relative:.2f}×)"


def header(result):
    """Return the column title of one system's result: its name, version and store."""
    name = result["system"] + (" again" if result.get("again") else "")
    return f"{name} {result.get('version', '')} ({result.get('store', '?')})".replace("  ", " ")


def render_table(results, reference="atp"):
    """Return the table (Markdown lines) of ``results``, one column per system, each
    peer's figures with their ratio to ``reference``'s (higher is faster for rates,
    slower for times; a system measured again, to its first run). A system that failed
    says so."""
    first = next((r for r in results if r["system"] == reference), {})
    base = first.get("figures", {})
    lines = ["| figure | " + " | ".join(header(r) for r in results) + " |",
             "|---|" + "---|" * len(results)]
    for key, label, form in FIGURES:
        cells = []
        for result in results:
            if "error" in result and key not in result.get("figures", {}):
                cells.append("failed")
                continue
            value = result.get("figures", {}).get(key)
            relative = None if result is first else ratio(value, base.get(key))
            cells.append(cell(value, form, relative))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def render_notes(results):
    """Return one line per system: how it was set up, its bulk API, what went wrong."""
    lines = []
    for result in results:
        if result.get("again") and "error" not in result:
            continue  # said once
        line = (f"- {result['system']}: {result.get('configuration', '')}; bulk enqueue: "
                f"{result.get('bulk_api', '')}")
        figures = result.get("figures", {})
        if figures.get("repeated"):
            line += f"; {figures['repeated']} task(s) ran twice"
        if figures.get("stream_missing"):
            line += f"; {figures['stream_missing']} stream task(s) had not run at the end"
        if figures.get("stream_behind_s", 0) > 1:
            line += f"; the stream's producer fell {figures['stream_behind_s']:.1f} s behind"
        if "error" in result:
            line += f"; FAILED: {result['error']}"
        lines.append(line)
    return lines
