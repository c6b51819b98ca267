"""What retention's purge costs a task, by the size of its steps.

    python -m bench.purge [--tasks 5000] [--steps 50 500]

For each step size, ``--tasks`` no-op tasks are enqueued, claimed and ended, dated past
their type's retention, then purged back to back in steps of that size
(``atp.engine.purge_type_due``, as a daemon's retention does): the wall time and this
process's CPU per task purged. A step's fixed cost (the type read, the rows found, a
statement a table, the commit) is most of a small step's; ``atp.daemon.retention`` sizes
its steps by it. The database comes from ATP_BENCH_DATABASE_URL (a fresh temporary
SQLite file when unset), dropped and created anew.
"""

import argparse
import datetime
import time

from bench.daemon import prepare_database

TYPE = "bench.purged"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--steps", type=int, nargs="+", default=[50, 500])
    options = parser.parse_args()
    url = prepare_database()
    from django.db import connection
    from django.db.models import F

    import atp
    from atp import engine
    from atp.engine.outcomes import Outcome
    from atp.models import Instance
    from atp.states import Status

    print(f"database: {connection.vendor} ({url.rsplit('@', 1)[-1]})")
    task_type = atp.register_task_type(TYPE, "bench.handlers.noop", retention=60)
    daemon = engine.register_daemon(workers=1)
    for step in options.steps:
        atp.enqueue_many(task_type, [{}] * options.tasks)
        while claimed := engine.claim_for_daemon(daemon, 500, [task_type.pk], start=500):
            engine.settle(daemon, [Outcome(task.pk, task.attempt, Status.FINISHED)
                                   for task in claimed])
        Instance.objects.filter(type=task_type).update(
            finished=F("finished") - datetime.timedelta(minutes=5))
        wall, cpu, steps = time.perf_counter(), time.process_time(), 0
        while engine.purge_type_due(task_type.pk, step)[1]:
            steps += 1
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(f"steps of {step}: {options.tasks / wall:,.0f} tasks/s; a task "
              f"{wall / options.tasks * 1e3:.3f} ms, {cpu / options.tasks * 1e3:.3f} ms "
              f"of this process's CPU ({steps + 1} steps)", flush=True)


if __name__ == "__main__":
    main()
