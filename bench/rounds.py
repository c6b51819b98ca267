"""What an idle daemon's rounds cost: the CPU and the time of each of its lone verbs.

    python -m bench.rounds [--calls 1000]

A task that comes alone, as in a steady stream below the drain rate, costs the
supervisor rounds of its own: a claim of one task (started), then, once its worker
reports, a settle of one end, or with the claim of the next task when one waits (a
busy daemon's round, as in ``make soak``); between tasks, an idle daemon claims nothing and asks
when the next delayed task comes due. A handler that reports as it goes (``task.log``,
``task.set_progress``: the soak's mix does) costs its worker a write each. Each is timed here in this process (no daemon,
no worker), ``--calls`` times after a warm-up: its wall time and this process's CPU
(the client's side of the round: Django, psycopg, the engine's Python) per call. The
database comes from ATP_BENCH_DATABASE_URL (a fresh temporary SQLite file when unset);
a PostgreSQL or MariaDB/MySQL database named there is dropped and created anew.
"""

import argparse
import tempfile
import time

from bench.daemon import TYPE, machine_line, machine_reference, prepare_database

WARM_UP = 50


def per_call(calls, verb, before=None):
    """Return (wall µs, CPU µs) per call of ``verb()``; ``before()`` runs untimed before each."""
    wall = cpu = 0.0
    for _ in range(calls):
        if before is not None:
            before()
        wall_began, cpu_began = time.perf_counter(), time.process_time()
        verb()
        wall += time.perf_counter() - wall_began
        cpu += time.process_time() - cpu_began
    return wall / calls * 1e6, cpu / calls * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    options = parser.parse_args()
    url = prepare_database()
    from django.db import connection

    import atp
    from atp import engine
    from atp.engine.outcomes import Outcome
    from atp.states import Status

    print(f"database: {connection.vendor} ({url.rsplit('@', 1)[-1]})")
    print(machine_line(machine_reference(tempfile.gettempdir())))
    daemon = engine.register_daemon(workers=1)
    type_ids = [atp.get_type(TYPE).pk]
    claimed = []

    def claim_one():
        claimed[:] = engine.claim_for_daemon(daemon, 1, type_ids, start=1)

    def settle_one():
        [task] = claimed
        engine.settle(daemon, [Outcome(task.pk, task.attempt, Status.FINISHED)])

    def settle_and_claim_one():
        [task] = claimed
        _, claimed[:] = engine.settle_and_claim(
            daemon, [Outcome(task.pk, task.attempt, Status.FINISHED)], 1, type_ids, start=1)

    running = []

    def a_running_task():
        if not running:
            atp.enqueue(TYPE)
            running[:] = engine.claim_for_daemon(daemon, 1, type_ids, start=1)

    def log_line():
        [task] = running
        engine.log(task.pk, "working", attempt=task.attempt, daemon=daemon)

    def progress():
        [task] = running
        engine.set_progress(task.pk, 1, 2, "working", attempt=task.attempt)

    verbs = {
        "claim, nothing to claim": (lambda: engine.claim_for_daemon(daemon, 1, type_ids), None),
        "next due time": (lambda: engine.next_due(type_ids, 1.0), None),
        "claim of one task, started": (claim_one, lambda: atp.enqueue(TYPE)),
        "settle of one end": (settle_one, lambda: (atp.enqueue(TYPE), claim_one())),
        "settle of one end with the next claim": (
            settle_and_claim_one, lambda: (atp.enqueue(TYPE), claimed or claim_one())),
        "a handler's history line (task.log)": (log_line, a_running_task),
        "a handler's progress (task.set_progress)": (progress, a_running_task),
    }
    print(f"{options.calls} calls each, after {WARM_UP}: per call")
    print("| round | wall | CPU of this process |\n|---|---|---|")
    for name, (verb, before) in verbs.items():
        per_call(WARM_UP, verb, before)
        wall, cpu = per_call(options.calls, verb, before)
        print(f"| {name} | {wall:.0f} µs | {cpu:.0f} µs |", flush=True)


if __name__ == "__main__":
    main()
