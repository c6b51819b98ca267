"""The demo's task types, declared in code with ``@atp.task_type``."""

import math
import time
from xml.sax.saxutils import escape

import atp


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
