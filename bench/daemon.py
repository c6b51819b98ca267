"""Benchmark atpd: how fast it drains the queue, and how soon it starts a new task.

    python -m bench.daemon [--tasks 5000] [--workers 1 4] [--samples 50]

The database comes from ATP_BENCH_DATABASE_URL (a fresh temporary SQLite file when
unset). A PostgreSQL database named there is dropped and created anew. Run it through
``make bench``, which does both databases.

- drain: N no-op tasks are enqueued, then ``atpd --burst --workers W`` runs them.
  The rate is N over the time from the first task's start to the last one's end, on
  the database clock (process start-up excluded; the wall time is printed too).
- latency: one daemon with one worker idles; single tasks are enqueued one at a time
  and each one's start minus its creation (both on the database clock) is taken.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.database import recreate_postgres, set_up_django

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def prepare_database():
    url = os.environ.get("ATP_BENCH_DATABASE_URL")
    if not url:
        url = f"sqlite:///{tempfile.mkdtemp()}/bench.sqlite3"
        os.environ["ATP_BENCH_DATABASE_URL"] = url
    elif url.startswith(("postgres://", "postgresql://")):
        recreate_postgres(url)
    set_up_django("bench.settings")
    return url


def atpd(*args):
    return subprocess.Popen(
        [sys.executable, "-m", "django", "atpd", "--log-level", "WARNING", *map(str, args)],
        cwd=PROJECT_ROOT, env=os.environ.copy(),
    )


def reset():
    from atp.models import Daemon, Instance

    Instance.objects.all().delete()
    Daemon.objects.all().delete()


def drain(tasks, workers):
    from django.db.models import Max, Min

    import atp
    from atp.models import Instance

    reset()
    for start in range(0, tasks, 1000):
        atp.enqueue_many("bench.noop", [None] * min(1000, tasks - start))
    began = time.perf_counter()
    daemon = atpd("--burst", "--workers", workers)
    if daemon.wait() != 0:
        sys.exit("atpd failed")
    wall = time.perf_counter() - began
    done = Instance.objects.filter(status="FINISHED")
    assert done.count() == tasks, f"only {done.count()} of {tasks} finished"
    span = done.aggregate(first=Min("started"), last=Max("finished"))
    seconds = (span["last"] - span["first"]).total_seconds()
    return tasks / seconds, wall


def latency(samples):
    import atp
    from atp.models import Instance

    reset()
    daemon = atpd("--workers", 1)
    try:
        delays = []
        for _ in range(samples + 1):
            time.sleep(0.25)  # let the daemon go idle
            instance = atp.enqueue("bench.noop")
            while (row := Instance.objects.filter(pk=instance.pk, started__isnull=False)
                   .values("created", "started").first()) is None:
                time.sleep(0.002)
            delays.append((row["started"] - row["created"]).total_seconds() * 1000)
        delays = delays[1:]  # the first task also waited for the workers to start
    finally:
        daemon.terminate()
        daemon.wait()
    quantiles = statistics.quantiles(delays, n=20)
    return statistics.median(delays), quantiles[18]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--samples", type=int, default=50)
    options = parser.parse_args()
    url = prepare_database()
    import atp

    atp.register_task_type("bench.noop", "bench.handlers.noop")
    from django.db import connection

    vendor = connection.vendor
    print(f"database: {vendor} ({url.rsplit('@', 1)[-1]})")
    for workers in options.workers:
        rate, wall = drain(options.tasks, workers)
        print(f"drain {options.tasks} no-op tasks, {workers} worker(s): "
              f"{rate:,.0f} tasks/s (wall {wall:.1f} s with start-up)")
    p50, p95 = latency(options.samples)
    print(f"enqueue -> start on an idle daemon, {options.samples} tasks: "
          f"p50 {p50:.1f} ms, p95 {p95:.1f} ms")


if __name__ == "__main__":
    main()
