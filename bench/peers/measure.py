"""Measure one system: the same workloads for every system, written once.

    python -m bench.peers.measure SYSTEM [--tasks 5000] [--repeat 3] [--samples 200]
                                  [--bulk 20000] [--stream-seconds 60] --json PATH

Run by the driver (``python -m bench.peers``) in the system's own venv. Every time is
the body's ``time.time()`` against the enqueuer's, on this host (``bench.peers.body``).

- drain: ``--tasks`` no-op tasks enqueued up front (the bulk API, 1,000 a call), then
  workers started; the rate is the tasks over the time from the first task's start to
  the last one's end (so the workers' start-up is not in it); the median of
  ``--repeat`` runs, with 1 worker and with 4.
- idle latency: one worker, idle; ``--samples`` single tasks, each enqueued 50 ms after
  the one before ended; enqueue -> start and enqueue -> end, p50 and p99, and the time
  of the enqueue call itself (p50).
- bulk enqueue: ``--bulk`` tasks through the bulk API, 1,000 a call, no worker running.
- stream: 4 workers; tasks enqueued at a third of the system's own 4-worker drain rate
  for ``--stream-seconds``, in small batches every 20 ms (the bulk API); each task's
  wait is its start minus its batch's enqueue: p50 and p99.
"""

import argparse
import importlib
import json
import shutil
import signal
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench.peers import base
from bench.peers.body import Records
from bench.peers.report import quantiles, rate
from bench.peers.workers import Workers

BULK_BATCH = 1000
IDLE_PAUSE_SECONDS = 0.05
WARM_UP_TASKS = 3
#: How long a started worker may take to run its first task.
START_TIMEOUT_SECONDS = 60
STREAM_TICK_SECONDS = 0.02
#: How long the last tasks of a stream may take to start once it ended.
STREAM_GRACE_SECONDS = 30


class Bench:
    """One system's measurements: its runner, a scratch directory for the bodies'
    records, and a log file for its workers' output."""

    def __init__(self, runner, scratch, log_path):
        self.runner = runner
        self.scratch = Path(scratch)
        self.log_path = log_path
        self.count = 0

    def records(self):
        self.count += 1
        return Records(self.scratch / f"records-{self.count}")

    def workers(self, count, records):
        return Workers(self.runner, count, records.directory, self.log_path)

    def enqueue(self, numbers):
        numbers = list(numbers)
        for start in range(0, len(numbers), BULK_BATCH):
            self.runner.enqueue_many(numbers[start:start + BULK_BATCH])

    def wait(self, records, count, timeout, workers, poll=0.05):
        """Read ``records`` until ``count`` tasks ran; raise when a worker exited or after
        ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while records.read() < count:
            workers.check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(records.runs)} of {count} tasks ran in "
                                   f"{timeout:.0f} s")
            time.sleep(poll)

    def warm_up(self, records, workers):
        """Run a few single tasks (numbered from 0) so that the workers are up and idle."""
        for number in range(WARM_UP_TASKS):
            self.runner.enqueue_one(number)
            self.wait(records, number + 1, START_TIMEOUT_SECONDS, workers)
        time.sleep(0.5)
        return WARM_UP_TASKS

    def drain(self, tasks, count):
        self.runner.empty()
        self.enqueue(range(tasks))
        records = self.records()
        workers = self.workers(count, records)
        try:
            self.wait(records, tasks, START_TIMEOUT_SECONDS + tasks / 20, workers)
        finally:
            workers.stop()
        starts, ends = zip(*records.runs.values(), strict=True)
        return {"rate": rate(tasks, min(starts), max(ends)), "repeated": records.repeated}

    def latency(self, samples):
        self.runner.empty()
        records = self.records()
        workers = self.workers(1, records)
        starts, ends, calls = [], [], []
        try:
            first = self.warm_up(records, workers)
            for number in range(first, first + samples):
                time.sleep(IDLE_PAUSE_SECONDS)
                enqueued = time.time()
                self.runner.enqueue_one(number)
                calls.append((time.time() - enqueued) * 1000)
                self.wait(records, number + 1, START_TIMEOUT_SECONDS, workers, poll=0.002)
                started, ended = records.runs[number]
                starts.append((started - enqueued) * 1000)
                ends.append((ended - enqueued) * 1000)
        finally:
            workers.stop()
        return {"start": quantiles(starts), "end": quantiles(ends),
                "enqueue_p50": statistics.median(calls), "repeated": records.repeated}

    def bulk(self, tasks):
        self.runner.empty()
        began = time.perf_counter()
        self.enqueue(range(tasks))
        seconds = time.perf_counter() - began
        self.runner.empty()
        return tasks / seconds

    def stream(self, per_second, seconds, count=4):
        self.runner.empty()
        records = self.records()
        workers = self.workers(count, records)
        enqueued_at = {}
        behind = 0.0
        try:
            first = next_number = self.warm_up(records, workers)
            began = time.monotonic()
            while (elapsed := time.monotonic() - began) < seconds:
                due = int(per_second * elapsed) - (next_number - first)
                if due > 0:
                    numbers = range(next_number, next_number + due)
                    enqueued = time.time()
                    self.enqueue(numbers)
                    enqueued_at.update(dict.fromkeys(numbers, enqueued))
                    next_number += due
                behind = max(behind, time.monotonic() - began - (next_number - first) / per_second)
                records.read()
                time.sleep(STREAM_TICK_SECONDS)
            try:
                self.wait(records, next_number, STREAM_GRACE_SECONDS, workers)
            except TimeoutError:
                pass  # the tasks not run by now are counted as missing
        finally:
            workers.stop()
        waits = [(records.runs[number][0] - at) * 1000 for number, at in enqueued_at.items()
                 if number in records.runs]
        if not waits:
            raise RuntimeError(f"none of the stream's {len(enqueued_at)} tasks ran")
        return {"rate": per_second, "tasks": len(enqueued_at), **quantiles(waits),
                "missing": len(enqueued_at) - len(waits), "behind_s": behind,
                "repeated": records.repeated}


def measure(bench, options, figures):
    """Run every workload on ``bench``'s system, its figures into ``figures`` as they come
    (those measured before a failure are kept)."""
    figures["repeated"] = 0
    for count in (1, 4):
        runs = []
        for _ in range(options.repeat):
            drained = bench.drain(options.tasks, count)
            runs.append(drained["rate"])
            figures["repeated"] += drained["repeated"]
        figures[f"drain_{count}"] = statistics.median(runs)
        figures[f"drain_{count}_runs"] = runs
        say(f"drain {options.tasks:,}, {count} worker(s): {statistics.median(runs):,.0f} "
            f"tasks/s (median of {', '.join(f'{run:,.0f}' for run in runs)})")
    idle = bench.latency(options.samples)
    figures.update(start_p50=idle["start"]["p50"], start_p99=idle["start"]["p99"],
                   end_p50=idle["end"]["p50"], end_p99=idle["end"]["p99"],
                   enqueue_p50=idle["enqueue_p50"])
    figures["repeated"] += idle["repeated"]
    say(f"idle worker, {options.samples} single tasks: enqueue -> start p50 "
        f"{idle['start']['p50']:.1f} ms, p99 {idle['start']['p99']:.1f} ms; -> end p50 "
        f"{idle['end']['p50']:.1f} ms; one enqueue p50 {idle['enqueue_p50']:.2f} ms")
    figures["bulk_rate"] = bench.bulk(options.bulk)
    say(f"bulk enqueue of {options.bulk:,}: {figures['bulk_rate']:,.0f} tasks/s")
    if options.stream_seconds:
        stream = bench.stream(max(1, round(figures["drain_4"] / 3)), options.stream_seconds)
        figures.update(stream_rate=stream["rate"], stream_p50=stream["p50"],
                       stream_p99=stream["p99"], stream_tasks=stream["tasks"],
                       stream_missing=stream["missing"], stream_behind_s=stream["behind_s"])
        figures["repeated"] += stream["repeated"]
        say(f"stream at {stream['rate']:,} tasks/s for {options.stream_seconds} s: wait p50 "
            f"{stream['p50']:.1f} ms, p99 {stream['p99']:.1f} ms"
            + (f"; {stream['missing']} of {stream['tasks']:,} not run" if stream["missing"]
               else ""))


def say(line):
    print(f"  {line}", flush=True)


def stop_on_sigterm(signum, frame):
    # The workers run in sessions of their own, out of reach of a signal sent to this
    # process's group: unwind, so that each measurement's finally stops its workers.
    raise SystemExit(128 + signum)


def main():
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("system", choices=sorted(base.SYSTEMS))
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--bulk", type=int, default=20000)
    parser.add_argument("--stream-seconds", type=int, default=60)
    parser.add_argument("--logs", type=Path, default=base.PROJECT_ROOT / ".bench" / "peers-logs")
    parser.add_argument("--json", type=Path, required=True)
    options = parser.parse_args()
    runner = importlib.import_module(base.SYSTEMS[options.system][0]).Runner()
    options.logs.mkdir(parents=True, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=f"atp-peers-{options.system}-")
    result = {"system": runner.name, "store": runner.store, "bulk_api": runner.bulk_api,
              "configuration": runner.configuration, "figures": {}}
    try:
        result["version"] = runner.version()
        runner.prepare()
        if hasattr(runner, "machine_reference"):
            result["machine_reference"] = runner.machine_reference()
        bench = Bench(runner, scratch, options.logs / f"{options.system}.log")
        measure(bench, options, result["figures"])
    except Exception as exc:
        # Said in the table; the driver goes on with the next system.
        traceback.print_exc()
        result["error"] = f"{type(exc).__name__}: {exc}"
        return 1
    finally:
        runner.close()
        shutil.rmtree(scratch, ignore_errors=True)
        options.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
