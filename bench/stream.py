"""A steady stream: a producer enqueues at a fixed rate for minutes while daemons run the
tasks and purge them past their retention. It measures what a drain cannot: the wait
(enqueue -> start) minute by minute, and whether the tables stay bounded.

    python -m bench.stream [--minutes 3] [--rate N | --fraction 0.333] [--daemons 1]
                           [--workers 4] [--retention 60] [--mix noop|soak] [--json PATH]

The database comes from ATP_BENCH_DATABASE_URL, as for ``bench.daemon`` (a PostgreSQL
database named there is dropped and created anew). ``make bench`` runs it for 3
minutes at a third of the measured drain rate; ``make soak`` (``bench.soak``) runs the
long mixed workload on a stock PostgreSQL server.

- The rate: ``--rate`` tasks a second, or ``--fraction`` of the drain rate measured
  first with the same daemons (5,000 tasks of the mix, ``atpd --burst``; the median
  of three).
- The mix: ``noop`` (no-op tasks), or ``soak``: 85 % no-op, 13 % real work (progress
  and history entries, about 10 ms), 2 % failing once and retried. Every type keeps
  its ended tasks ``--retention`` seconds.
- The wait of a task is its first attempt's start minus its creation, both on the
  database clock; each minute's p50 and p99 are of the tasks created in that minute.
  Retried tasks are left out (their start is their last attempt's).
- Every 10 s: the rows of the task, history and queue tables (and their sizes on
  PostgreSQL) and the daemons' memory. The bound on the task table is what retention
  promises: rate x (retention + 60 s).
- By 10 s of the stream (``per_10s`` in the JSON): the waits' p50 and p99, how busy
  the machine was, and the CPU seconds the daemons, the database's PostgreSQL server,
  this benchmark and everything else used, and the hypervisor's steal
  (``MachineUse``): a slow window says whether the stream's own processes or something
  else took the CPU.

It prints a line a minute and a summary, and writes JSON to ``--json`` (default
``.bench/stream-<database>.json``).
"""

import argparse
import datetime
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
TYPES = {"noop": "stream.noop", "work": "stream.work", "flaky": "stream.flaky"}
MIXES = {"noop": {"noop": 1.0}, "soak": {"noop": 0.85, "work": 0.13, "flaky": 0.02}}
#: Measured by their wait: the others' start is their last attempt's.
WAITED = ("noop", "work")
TICK_SECONDS = 0.02
SAMPLE_SECONDS = 10
DRAIN_TASKS = 5000


def register(retention):
    import atp

    kept = datetime.timedelta(seconds=retention)
    atp.register_task_type(TYPES["noop"], "bench.handlers.noop", retention=kept)
    atp.register_task_type(TYPES["work"], "bench.handlers.work", retention=kept)
    atp.register_task_type(TYPES["flaky"], "bench.handlers.fail_first", retention=kept,
                           retry_limit=1, min_backoff=datetime.timedelta(seconds=0.1),
                           retry_jitter=False)


def start_daemons(count, workers, logs):
    """Start ``count`` atpd processes of ``workers`` workers; return them."""
    logs.mkdir(parents=True, exist_ok=True)
    return [subprocess.Popen(
        [sys.executable, "-m", "django", "atpd", "--workers", str(workers), "--types",
         ",".join(TYPES.values()), "--log-level", "WARNING"],
        cwd=PROJECT_ROOT, env=os.environ.copy(),
        stdout=open(logs / f"atpd-{number}.log", "w"), stderr=subprocess.STDOUT,
    ) for number in range(count)]


def stop(daemons):
    for daemon in daemons:
        daemon.send_signal(signal.SIGTERM)
    for daemon in daemons:
        try:
            daemon.wait(60)
        except subprocess.TimeoutExpired:
            daemon.kill()


def drain_rate(daemons, workers, mix):
    """Return the rate (tasks/s) at which ``daemons`` burst daemons of ``workers`` drain
    5,000 tasks of the ``mix``."""
    from django.db.models import Max, Min

    import atp
    from atp.models import Instance

    picked = random.Random(7).choices(list(mix), list(mix.values()), k=DRAIN_TASKS)
    for kind in mix:
        atp.enqueue_many(TYPES[kind], [None] * picked.count(kind))
    first = Instance.objects.order_by("pk").values_list("pk", flat=True).first()
    burst = [subprocess.Popen(
        [sys.executable, "-m", "django", "atpd", "--burst", "--workers", str(workers),
         "--types", ",".join(TYPES.values()), "--log-level", "WARNING"], cwd=PROJECT_ROOT,
        env=os.environ.copy()) for _ in range(daemons)]
    for daemon in burst:
        daemon.wait()
    span = Instance.objects.filter(pk__gte=first).aggregate(
        first=Min("started"), last=Max("finished"))
    atp.purge_finished(older_than=0)
    return DRAIN_TASKS / (span["last"] - span["first"]).total_seconds()


class Producer(threading.Thread):
    """Enqueue ``rate`` tasks a second of the ``mix``, in small batches every tick."""

    def __init__(self, rate, mix):
        super().__init__(daemon=True)
        self.rate, self.mix = rate, mix
        self.stopped = threading.Event()
        self.enqueued = 0
        self.behind_seconds = 0.0

    def run(self):
        from django.db import connections

        import atp

        chooser = random.Random(42)
        kinds, weights = zip(*self.mix.items(), strict=True)
        began = time.monotonic()
        try:
            while not self.stopped.is_set():
                due = int(self.rate * (time.monotonic() - began)) - self.enqueued
                if due > 0:
                    picked = chooser.choices(kinds, weights, k=due)
                    for kind in kinds:
                        count = picked.count(kind)
                        if count:
                            atp.enqueue_many(TYPES[kind], [None] * count)
                    self.enqueued += due
                lag = time.monotonic() - began - self.enqueued / self.rate
                self.behind_seconds = max(self.behind_seconds, lag)
                time.sleep(TICK_SECONDS)
        finally:
            connections.close_all()


class MachineUse:
    """Where the machine's CPU went, by group of processes: the daemons (their supervisors
    and workers), the stream's PostgreSQL server (its postmaster and the processes it
    started, when the database is a PostgreSQL server on this machine), this benchmark
    (the producer and the monitor) and the rest; and the time the hypervisor gave to
    other machines (steal). The rest is the machine's busy time less the groups': a
    window where it is large is one where something outside the stream took the CPU."""

    GROUPS = ("daemons", "postgres", "bench", "other", "steal")

    def __init__(self, daemon_pids, server_pid=None):
        import psutil

        self.daemon_pids = set(daemon_pids)
        self.server_pid = server_pid
        self.processes = {}  # pid -> CPU seconds at the last reading
        self.machine = psutil.cpu_times()
        self.read(baseline=True)

    def read(self, baseline=False):
        """Return the CPU seconds each group used since the last reading."""
        import psutil

        used = dict.fromkeys(self.GROUPS, 0.0)
        me, seen = os.getpid(), {}
        for process in psutil.process_iter(["name", "ppid"]):
            try:
                times = process.cpu_times()
            except psutil.Error:
                continue
            seen[process.pid] = times.user + times.system
            # A process first seen now started since the last reading: all its time counts.
            spent = 0.0 if baseline else seen[process.pid] - self.processes.get(process.pid, 0.0)
            group = self._group(process, me)
            if group is not None:
                used[group] += max(spent, 0.0)
        self.processes = seen
        machine, before = psutil.cpu_times(), self.machine
        self.machine = machine
        busy = sum(getattr(machine, field, 0.0) - getattr(before, field, 0.0)
                   for field in ("user", "nice", "system", "irq", "softirq"))
        used["steal"] = getattr(machine, "steal", 0.0) - getattr(before, "steal", 0.0)
        used["other"] = max(0.0, busy - used["daemons"] - used["postgres"] - used["bench"])
        return used

    def _group(self, process, me):
        if process.pid == me:
            return "bench"
        if process.pid in self.daemon_pids or process.info["ppid"] in self.daemon_pids:
            return "daemons"
        if self.server_pid is not None and self.server_pid in (process.pid, process.info["ppid"]):
            return "postgres"
        return None


def server_pid():
    """Return the process id of the PostgreSQL server the benchmark's database is on, when
    it runs on this machine (the parent of this connection's backend); else None."""
    import psutil
    from django.db import connection

    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    try:
        server = psutil.Process(backend).parent()
    except psutil.Error:  # another machine's, or another container's
        return None
    return None if server is None or not server.name().startswith("postgres") else server.pid


class Monitor(threading.Thread):
    """Read each task's wait once it started, and sample the tables and the daemons."""

    def __init__(self, began, daemons):
        super().__init__(daemon=True)
        self.began = began  # the stream's start, on the database clock
        self.daemons = daemons
        self.stopped = threading.Event()
        self.waits = {}  # minute -> [ms]
        self.waits_10s = {}  # ten seconds -> [ms], to find what a bad minute hides
        self.cpu_10s = {}  # ten seconds -> [% of all CPUs busy, each second]
        self.use_10s = {}  # ten seconds -> {group: CPU seconds} (MachineUse)
        self.began_monotonic = time.monotonic()
        self.samples = []
        self.cursor = 0

    def run(self):
        import psutil
        from django.db import connections

        next_sample = 0.0
        psutil.cpu_percent()
        machine = MachineUse((daemon.pid for daemon in self.daemons), server_pid())
        try:
            while not self.stopped.wait(1.0):
                # How busy the whole machine was, second by second, by ten seconds.
                second = int((time.monotonic() - self.began_monotonic) // 10)
                self.cpu_10s.setdefault(second, []).append(psutil.cpu_percent())
                window = self.use_10s.setdefault(second, dict.fromkeys(MachineUse.GROUPS, 0.0))
                for group, seconds in machine.read().items():
                    window[group] += seconds
                self.read_waits()
                if time.monotonic() >= next_sample:
                    self.samples.append(self.sample())
                    next_sample = time.monotonic() + SAMPLE_SECONDS
            self.read_waits()
        finally:
            connections.close_all()

    def read_waits(self):
        from atp.models import Instance

        waited = {task_type.pk for task_type in _types() if task_type.identifier in
                  {TYPES[kind] for kind in WAITED}}
        while True:
            rows = list(Instance.objects.filter(pk__gt=self.cursor).order_by("pk").values_list(
                "pk", "type_id", "attempt", "created", "started")[:5000])
            for pk, type_id, attempt, created, started in rows:
                if type_id in waited and started is None:
                    return  # the first task not started yet: read again from it
                self.cursor = pk
                if type_id in waited and attempt == 1:
                    seconds = (created - self.began).total_seconds()
                    wait = (started - created).total_seconds() * 1000
                    self.waits.setdefault(int(seconds // 60), []).append(wait)
                    self.waits_10s.setdefault(int(seconds // 10), []).append(wait)
            if len(rows) < 5000:
                return

    def sample(self):
        import psutil
        from django.db import connection

        from atp.models import Instance, LogRecord, Task

        figures = {"at": time.monotonic(), "tasks": Instance.objects.count(),
                   "history": LogRecord.objects.count(), "queue": Task.objects.count()}
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                for key, model in (("tasks_mb", Instance), ("history_mb", LogRecord),
                                   ("queue_mb", Task)):
                    cursor.execute("SELECT pg_total_relation_size(%s)", [model._meta.db_table])
                    figures[key] = cursor.fetchone()[0] / 2**20
        rss = 0
        for daemon in self.daemons:
            try:
                process = psutil.Process(daemon.pid)
                rss += sum(p.memory_info().rss for p in [process, *process.children()])
            except psutil.Error:
                pass
        figures["rss_mb"] = rss / 2**20
        return figures


def _types():
    from atp.models import Type

    return list(Type.objects.all())


def quantiles(values):
    if len(values) < 2:
        return {"p50": values[0] if values else None, "p99": values[0] if values else None}
    cuts = statistics.quantiles(values, n=100)
    return {"p50": statistics.median(values), "p99": cuts[98]}


def run(minutes, rate, daemons_count, workers, retention, mix, logs):
    """Run the stream; return its figures."""
    from atp.db import database_now
    from atp.engine.base import database

    daemons = start_daemons(daemons_count, workers, logs)
    time.sleep(2)  # started and idle
    began = database_now(database())
    producer, monitor = Producer(rate, MIXES[mix]), Monitor(began, daemons)
    producer.start()
    monitor.start()
    started = time.monotonic()
    try:
        for minute in range(minutes):
            while time.monotonic() < started + 60 * (minute + 1):
                time.sleep(0.5)
            print_minute(minute, monitor, rate)
    finally:
        producer.stopped.set()
        producer.join()
        time.sleep(5)  # the last tasks start
        monitor.stopped.set()
        monitor.join()
        stop(daemons)
    return summarise(minutes, rate, retention, producer, monitor)


def print_minute(minute, monitor, rate):
    # The minute before the last: its tasks have all started by now.
    waits = monitor.waits.get(minute - 1) if minute else None
    last = monitor.samples[-1] if monitor.samples else {}
    shown = (f"wait p50 {quantiles(waits)['p50']:.1f} ms, p99 {quantiles(waits)['p99']:.1f} ms"
             if waits else "waits: (next minute)")
    print(f"minute {minute + 1}: {rate:,.0f} tasks/s; {shown} (minute {minute}); "
          f"tasks table {last.get('tasks', 0):,} rows, history {last.get('history', 0):,}, "
          f"queue {last.get('queue', 0):,}; daemons {last.get('rss_mb', 0):.0f} MB", flush=True)


def summarise(minutes, rate, retention, producer, monitor):
    per_minute = [{"minute": minute + 1, "tasks": len(monitor.waits.get(minute, [])),
                   **quantiles(monitor.waits.get(minute, [0.0]))} for minute in range(minutes)]
    every = [wait for minute in range(minutes) for wait in monitor.waits.get(minute, [])]
    first = [wait for minute in range(min(2, minutes)) for wait in monitor.waits.get(minute, [])]
    later = per_minute[2:] or per_minute
    bound = rate * (retention + 60)
    samples = monitor.samples
    return {
        "began": monitor.began.isoformat(), "rate": rate, "minutes": minutes,
        "retention": retention,
        "enqueued": producer.enqueued, "producer_behind_s": producer.behind_seconds,
        "wait": quantiles(every), "first_minutes_wait": quantiles(first),
        "worst_minute_p50": max(m["p50"] for m in per_minute),
        "worst_minute_p99": max(m["p99"] for m in per_minute),
        "worst_later_minute": max(later, key=lambda m: m["p99"])["minute"],
        "worst_later_minute_p99": max(m["p99"] for m in later),
        "per_minute": per_minute,
        "per_10s": [{"from_s": 10 * key, "tasks": len(values), **quantiles(values),
                     "cpu_busy_max": max(monitor.cpu_10s.get(key, [0])),
                     "cpu_seconds": {group: round(seconds, 2) for group, seconds
                                     in monitor.use_10s.get(key, {}).items()}}
                    for key, values in sorted(monitor.waits_10s.items())],
        "samples": samples,
        "tasks_max": max((s["tasks"] for s in samples), default=0), "tasks_bound": bound,
        "history_max": max((s["history"] for s in samples), default=0),
        "queue_max": max((s["queue"] for s in samples), default=0),
        "history_mb_max": max((s.get("history_mb", 0) for s in samples), default=0),
        "tasks_mb_max": max((s.get("tasks_mb", 0) for s in samples), default=0),
        "rss_mb_first": samples[1]["rss_mb"] if len(samples) > 1 else None,
        "rss_mb_last": samples[-1]["rss_mb"] if samples else None,
    }


def print_summary(result):
    wait, first = result["wait"], result["first_minutes_wait"]
    print(f"\nsteady stream, {result['rate']:,.0f} tasks/s for {result['minutes']} minutes "
          f"(retention {result['retention']} s): {result['enqueued']:,} tasks")
    print(f"  wait (enqueue -> start): p50 {wait['p50']:.1f} ms, p99 {wait['p99']:.1f} ms; "
          f"worst minute p50 {result['worst_minute_p50']:.1f} ms, p99 "
          f"{result['worst_minute_p99']:.1f} ms; first two minutes p99 {first['p99']:.1f} ms")
    kept = "within" if result["tasks_max"] <= result["tasks_bound"] else "OVER"
    print(f"  task table at most {result['tasks_max']:,} rows ({kept} the bound "
          f"{result['tasks_bound']:,.0f} = rate x (retention + 60 s)); history at most "
          f"{result['history_max']:,} rows"
          + (f" ({result['history_mb_max']:.0f} MB)" if result["history_mb_max"] else "")
          + f"; queue at most {result['queue_max']:,}")
    if result["rss_mb_first"] is not None:
        print(f"  daemons' memory {result['rss_mb_first']:.0f} -> {result['rss_mb_last']:.0f} MB")
    if result["producer_behind_s"] > 1:
        print(f"  (the producer fell {result['producer_behind_s']:.1f} s behind its rate)")


def main():
    from bench.daemon import prepare_database

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=int, default=3)
    parser.add_argument("--rate", type=float, default=None)
    parser.add_argument("--fraction", type=float, default=1 / 3)
    parser.add_argument("--daemons", type=int, default=1)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--retention", type=float, default=60)
    parser.add_argument("--mix", choices=sorted(MIXES), default="noop")
    parser.add_argument("--json", type=Path, default=None)
    options = parser.parse_args()
    prepare_database()
    from django.db import connection

    register(options.retention)
    rate = options.rate
    if rate is None:
        # The median of three: one drain of a few seconds varies by a third.
        drains = [drain_rate(options.daemons, options.workers, MIXES[options.mix])
                  for _ in range(3)]
        drained = statistics.median(drains)
        rate = round(drained * options.fraction)
        print(f"drain of {DRAIN_TASKS:,} tasks ({options.mix}), {options.daemons} daemon(s) x "
              f"{options.workers} workers: {drained:,.0f} tasks/s (median of "
              f"{', '.join(f'{d:,.0f}' for d in drains)}); the stream runs at "
              f"{options.fraction:.2f} of it", flush=True)
    logs = PROJECT_ROOT / ".bench" / "stream-logs"
    result = run(options.minutes, rate, options.daemons, options.workers, options.retention,
                 options.mix, logs)
    result.update(database=connection.vendor, mix=options.mix, daemons=options.daemons,
                  workers=options.workers, date=datetime.date.today().isoformat())
    print_summary(result)
    path = options.json or PROJECT_ROOT / ".bench" / f"stream-{connection.vendor}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {path}; the daemons' logs in {logs}")
    return result


if __name__ == "__main__":
    main()
