"""Time the monitoring pages with a million tasks: the admin's task list, a filtered
list, a task's page, atp's dashboard (with its charts of the last hour, and of the last
day), a type's page, the task list, the Prometheus metrics and the health probe.

    python -m bench.admin_pages [--tasks 1000000] [--history 5]

The database (ATP_BENCH_DATABASE_URL, PostgreSQL) is dropped and filled anew: TASKS
ended tasks over four types (1 % failed, spread over the types), HISTORY state-history rows each, 10,000
waiting tasks, then ``VACUUM ANALYZE``. Each page is fetched as a superuser through
Django's test client, once to warm up and then RUNS times; the median is printed.
"""

import argparse
import os
import statistics
import sys
import time

from bench.database import recreate_postgres, set_up_django

RUNS = 5


def prepare(url):
    recreate_postgres(url)
    set_up_django("bench.admin_settings")


def fill(tasks, history):
    from django.db import connection

    import atp
    from atp import engine

    types = [atp.register_task_type(f"bench.kind{k}", "bench.handlers.noop") for k in range(4)]
    daemon = engine.register_daemon(workers=4)
    first_type = min(t.pk for t in types)
    began = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO atp_instance (type_id, identifier, named, status, priority, attempt,
                restarts, retries, snoozes, progress_message, created, updated, started, finished,
                daemon_id)
            SELECT %s + n %% 4, 'task-' || n, true,
                   CASE WHEN n %% 97 = 0 THEN 'FAILED' ELSE 'FINISHED' END, 0, 1, 0, 0, 0, '',
                   ts, ts + interval '2 s', ts + interval '1 s', ts + interval '2 s', %s
            FROM (SELECT n, now() - (%s - n) * interval '3 s' AS ts
                  FROM generate_series(1, %s) AS n) AS s
            """,
            [first_type, daemon.pk, tasks, tasks],
        )
        cursor.execute(
            """
            INSERT INTO atp_logrecord (instance_id, time, status, attempt, message, daemon,
                actor)
            SELECT i.id, i.created + k * interval '100 ms',
                   (ARRAY['ACCEPTED', 'SCHEDULED', 'RUNNING', NULL, 'FINISHED'])[1 + (k - 1) %% 5],
                   CASE WHEN k = 1 THEN 0 ELSE 1 END,
                   CASE WHEN k = 4 THEN 'halfway through the input' ELSE '' END, 'bench:1', ''
            FROM atp_instance AS i, generate_series(1, %s) AS k
            """,
            [history],
        )
        cursor.execute("INSERT INTO atp_inputs (instance_id, input_format, data) "
                       "SELECT id, 'json', '{\"n\": 1}' FROM atp_instance WHERE id %% 1000 = 0", [])
    atp.enqueue_many("bench.kind0", [{"waiting": True}] * 10_000)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    print(f"filled: {tasks:,} tasks, {tasks * history:,} history rows in "
          f"{time.perf_counter() - began:.0f} s", flush=True)


def timed(client, url, statuses=(200,)):
    response = client.get(url)
    assert response.status_code in statuses, (url, response.status_code)
    durations = []
    for _ in range(RUNS):
        began = time.perf_counter()
        client.get(url)
        durations.append(time.perf_counter() - began)
    return statistics.median(durations)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--history", type=int, default=5)
    options = parser.parse_args()
    url = os.environ.get("ATP_BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/atp_bench_admin")
    if not url.startswith(("postgres://", "postgresql://")):
        sys.exit("bench.admin_pages needs PostgreSQL (ATP_BENCH_DATABASE_URL)")
    os.environ["ATP_BENCH_DATABASE_URL"] = url
    prepare(url)
    fill(options.tasks, options.history)

    from django.contrib.auth import get_user_model
    from django.test import Client

    from atp.models import Instance, Type

    get_user_model().objects.create_superuser("bench", password="bench")
    client = Client()
    client.login(username="bench", password="bench")
    # A failed task some way down the list, not the newest one.
    failed = list(Instance.objects.filter(status="FAILED").order_by("-pk")
                  .values_list("pk", flat=True)[:501])[-1]
    kind = Type.objects.get(identifier="bench.kind1")
    pages = [
        ("admin task list", "/admin/atp/instance/"),
        ("admin list, filtered by state and type",
         f"/admin/atp/instance/?status__exact=FAILED&type__id__exact={kind.pk}"),
        ("admin list, matching nothing",
         f"/admin/atp/instance/?status__exact=CANCELLED&type__id__exact={kind.pk}"),
        ("admin list, all finished", "/admin/atp/instance/?status__exact=FINISHED"),
        ("admin list, page 200", "/admin/atp/instance/?p=200"),
        ("admin list, searched by identifier", "/admin/atp/instance/?q=task-123456"),
        ("admin task page", f"/admin/atp/instance/{failed}/change/"),
        ("admin history list", "/admin/atp/logrecord/"),
        ("admin inputs list", "/admin/atp/inputs/"),
        ("dashboard (charts of the last hour)", "/atp/"),
        ("dashboard, charts of the last day", "/atp/?window=day"),
        ("dashboard, its refresh", "/atp/?partial=1&window=hour"),
        ("type page (charts of the last hour)", f"/atp/types/{kind.pk}/"),
        ("type page, charts of the last day", f"/atp/types/{kind.pk}/?window=day"),
        ("task list, filtered", "/atp/tasks/?type=bench.kind1&status=FAILED"),
        ("task page", f"/atp/tasks/{failed}/"),
        ("Prometheus metrics", "/atp/metrics"),
    ]
    print(f"median of {RUNS} renders, after one to warm up:")
    for label, page in pages:
        print(f"  {label:<42} {timed(client, page) * 1000:7.0f} ms")
    # No daemon runs the waiting tasks here: the probe answers 503, after the same queries.
    probe = timed(client, "/atp/health", statuses=(200, 503))
    print(f"  {'health probe':<42} {probe * 1000:7.0f} ms")


if __name__ == "__main__":
    main()
