"""The demo's task types, declared in code with ``@atp.task_type``."""

import colorsys
import math
import random
import time
from xml.sax.saxutils import escape

import atp
from atp_demo import fractal


@atp.task_type("demo.sleep", timeout=120, description="Sleeps, reporting progress.")
def sleep(task, inputs):
    seconds = int(inputs.get("seconds", 5))
    for second in range(seconds):
        task.set_progress(second, seconds, f"{second} of {seconds} s")
        time.sleep(1)
    task.set_progress(seconds, seconds, "done")
    return {"slept": seconds}


@atp.task_type("demo.primes", timeout=300, description="Counts primes (CPU work).")
def primes(task, inputs):
    limit = int(inputs.get("limit", 200_000))
    sieve = bytearray([1]) * (limit + 1)
    sieve[0:2] = b"\0\0"
    for number in range(2, math.isqrt(limit) + 1):
        if sieve[number]:
            sieve[number * number :: number] = bytearray(len(sieve[number * number :: number]))
    count = sum(sieve)
    task.log(f"{count} primes up to {limit}")
    return {"limit": limit, "primes": count}


@atp.task_type("demo.render", timeout=60, description="Renders a bar chart as SVG.")
def render(task, inputs):
    values = [float(value) for value in inputs.get("values", [3, 1, 4, 1, 5, 9, 2, 6])]
    title = str(inputs.get("title", "demo chart"))
    width, height, bar = 40 * len(values) + 20, 220, 30
    top = max(values) or 1
    bars = "".join(
        f'<rect x="{20 + 40 * index}" y="{200 - 180 * value / top:.1f}" width="{bar}" '
        f'height="{180 * value / top:.1f}" fill="#417690"/>'
        for index, value in enumerate(values)
    )
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">'
        f'<text x="10" y="15" font-family="sans-serif">{escape(title)}</text>{bars}</svg>'
    )
    task.set_response(svg, "image/svg+xml")


@atp.task_type("demo.fail", timeout=30, max_restarts=0, description="Always fails.")
def fail(task, inputs):
    raise RuntimeError(inputs.get("reason", "this demo task always fails"))


# The scenarios of the start page (atp_demo.scenarios starts them). Each keeps its
# finished tasks a day, so that a demo left running does not pile them up.
KEEP_FINISHED_SECONDS = 24 * 3600


@atp.task_type("demo.quilt.square", timeout=30, max_restarts=0, retention=KEEP_FINISHED_SECONDS,
               description="Colours one square of the quilt (a member of its batch).")
def quilt_square(task, inputs):
    square, side = int(inputs["square"]), int(inputs.get("side", 8))
    time.sleep(float(inputs.get("seconds", 1)))
    if inputs.get("fail"):
        raise RuntimeError(f"square {square} fails on purpose")
    row, column = divmod(square, side)
    # From yellow through green and blue to violet: red is for the squares that fail.
    hue = 0.14 + 0.66 * (row + column) / (2 * side - 2) + random.uniform(-0.03, 0.03)
    red, green, blue = colorsys.hls_to_rgb(hue, 0.55, 0.65)
    return {"square": square,
            "colour": "#" + "".join(f"{int(part * 255):02x}" for part in (red, green, blue))}


@atp.task_type("demo.quilt.done", timeout=30, retention=KEEP_FINISHED_SECONDS,
               description="Runs once every square of a quilt has ended (the batch's on-complete).")
def quilt_done(task, inputs):
    task.log(f"quilt {inputs['name']}: {inputs['finished']} squares coloured, "
             f"{inputs['failed']} failed, {inputs['cancelled']} cancelled")
    return {key: inputs[key] for key in ("total", "finished", "failed", "cancelled")}


@atp.task_type("demo.fractal", timeout=120, max_restarts=1, retention=KEEP_FINISHED_SECONDS,
               description="Renders the Mandelbrot set as a PNG, a row at a time (a WPS-style job).")
def render_fractal(task, inputs):
    width, height = int(inputs.get("width", 480)), int(inputs.get("height", 360))
    iterations, seconds = int(inputs.get("iterations", 200)), float(inputs.get("seconds", 10))
    # Paced over `seconds`, as a job waiting on a data source would be: the demo shows
    # its progress whatever the machine's speed.
    started, rows = time.monotonic(), []
    for row in range(height):
        times = fractal.escape_times(row, width, height, iterations)
        rows.append(fractal.scanline(times, iterations))
        task.set_progress(row + 1, height, f"row {row + 1} of {height}")
        time.sleep(max(0.0, started + seconds * (row + 1) / height - time.monotonic()))
    task.set_response(fractal.png(rows, width, height), "image/png")


@atp.task_type("demo.flaky", timeout=30, retry_limit=3, min_backoff=1, max_backoff=2,
               retention=KEEP_FINISHED_SECONDS,
               description="Fails twice, then succeeds: its retries are in its history.")
def flaky(task, inputs):
    if task.execution_count < 2:  # the handler's earlier failures
        raise ConnectionError(
            f"the flaky service did not answer (failure {task.execution_count + 1} of 2)")
    return {"failures before this attempt": task.execution_count}


@atp.task_type("demo.hang", timeout=3, max_restarts=2, retention=KEEP_FINISHED_SECONDS,
               description="Never returns: its time-out kills it until the restart limit fails it.")
def hang(task, inputs):
    task.log(f"attempt {task.attempt}: hanging until the time-out kills this worker")
    time.sleep(3600)


@atp.task_type("demo.limited", timeout=30, rate="30/m", bucket_size=1,
               retention=KEEP_FINISHED_SECONDS,
               description="Rate-limited: at most one start every 2 s, across all daemons.")
def limited(task, inputs):
    time.sleep(0.2)
    return {"number": inputs.get("number")}


@atp.task_type("demo.tick", timeout=30, retention=600,
               description="Enqueued every few seconds by the schedule demo-tick.")
def tick(task, inputs):
    return {"ticked at attempt": task.attempt}
