"""What a drained task costs each of atpd's processes in CPU, and the database its statements.

    python -m bench.cpu [--tasks 20000] [--workers 4]

``--tasks`` no-op tasks are bulk-enqueued into ATP_BENCH_DATABASE_URL (dropped and
made anew; a temporary SQLite file when unset), then one ``atpd --burst`` drains them.
The supervisor's and its workers' user and system time (``psutil``, read every 0.1 s
until atpd exits: a worker's last reading is its time) are divided by the tasks: the
supervisor's includes its start. On PostgreSQL with ``pg_stat_statements`` loaded
(``shared_preload_libraries``) it adds the server's time in the statements that took
most, per task. A drain's rate is ``bench.daemon``'s figure; this one says where the
CPU goes, which is steadier than a rate on a shared machine.
"""

import argparse
import os
import sys
import time

from bench.daemon import PROJECT_ROOT, TYPE, bulk_enqueue, prepare_database


def statistics_ready():
    """Reset ``pg_stat_statements`` in the bench database; return whether it is there."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_stat_statements'")
        if cursor.fetchone() is None:
            return False
        try:
            cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            cursor.execute("SELECT pg_stat_statements_reset()")
        except Exception:  # not preloaded: the server has no statistics to give
            return False
    return True


def top_statements(tasks, limit=6):
    """Return ``(calls, µs a task, rows, statement's start)`` of the statements that took most."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT calls, total_exec_time, rows, left(regexp_replace(query, '\\s+', ' ', 'g'), 70) "
            "FROM pg_stat_statements "
            "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "ORDER BY total_exec_time DESC LIMIT %s", [limit])
        return [(calls, total * 1000 / tasks, rows, text)
                for calls, total, rows, text in cursor.fetchall()]


def drain(workers):
    """Run one ``atpd --burst`` until it exits; return ``(seconds, supervisor CPU seconds,
    workers' CPU seconds)``."""
    import psutil

    began = time.perf_counter()
    daemon = psutil.Popen(
        [sys.executable, "-m", "django", "atpd", "--burst", "--workers", str(workers),
         "--types", TYPE, "--log-level", "WARNING"], cwd=PROJECT_ROOT, env=os.environ.copy())
    supervisor, children = 0.0, {}
    while daemon.poll() is None:
        try:
            times = daemon.cpu_times()
            supervisor = times.user + times.system
            for child in daemon.children():
                times = child.cpu_times()
                children[child.pid] = times.user + times.system
        except psutil.Error:
            pass  # exiting, or a worker just gone: its last reading stands
        time.sleep(0.1)
    if daemon.returncode != 0:
        raise SystemExit(f"atpd exited with {daemon.returncode}")
    return time.perf_counter() - began, supervisor, sum(children.values())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--workers", type=int, default=4)
    options = parser.parse_args()

    url = prepare_database()
    bulk_enqueue(options.tasks)
    from django.db import connection, connections

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
            cursor.execute("CHECKPOINT")
    with_statistics = statistics_ready()
    connections.close_all()
    seconds, supervisor, workers = drain(options.workers)
    per_task = 1e6 / options.tasks
    print(f"{url.rsplit('/', 1)[-1]}: {options.tasks} no-op tasks, {options.workers} workers, "
          f"{seconds:.1f} s with start-up")
    print(f"CPU a task: supervisor {supervisor * per_task:.0f} µs, workers "
          f"{workers * per_task:.0f} µs")
    if with_statistics:
        print("the server's time in its statements, per task:")
        for calls, micros, rows, text in top_statements(options.tasks):
            print(f"  {micros:6.1f} µs  {calls:6d} calls {rows:7d} rows  {text}")


if __name__ == "__main__":
    main()
