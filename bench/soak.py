"""The soak: a steady stream of mixed work for minutes on a stock PostgreSQL server, with
the checks retention and latency must pass.

    python -m bench.soak [--minutes 12] [--rate N | --fraction 0.333] [--port 5499]

The server is a cluster of its own, made with the machine's ``initdb`` in
``.bench/cluster`` and removed afterwards (``bench.cluster``): autovacuum, checkpoints
and memory as a fresh install has them, as in production; or the database
``ATP_SOAK_DATABASE_URL`` names. The stream (``bench.stream``) runs the ``soak`` mix
(85 % no-op, 13 % real work with progress and history entries, 2 % failing once and
retried) from one producer through 2 daemons of 2 workers, every type keeping its
ended tasks 60 s, at a third of the rate those daemons drain the mix (or ``--rate``).

It passes when the task table stays within rate x (retention + 60 s) rows and no
minute after the first two has a p99 wait above 3 times the first two minutes' p99;
it exits 1 otherwise. Either way it prints the worst later minute by 10 s with where
the CPU went (``bench.stream.MachineUse``: the daemons, the soak's PostgreSQL server, the
benchmark, anything else, the hypervisor's steal). ``make soak`` runs it; its figures
are in docs/performance.md.
"""

import argparse
import os
import sys

RETENTION_SECONDS = 60
P99_GROWTH_LIMIT = 3


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=int, default=12)
    parser.add_argument("--rate", type=float, default=None)
    parser.add_argument("--fraction", type=float, default=1 / 3)
    parser.add_argument("--port", type=int, default=5499)
    options = parser.parse_args()
    from bench.cluster import PrivateCluster

    cluster = None
    url = os.environ.get("ATP_SOAK_DATABASE_URL")
    if not url:
        cluster = PrivateCluster(".bench/cluster", options.port)
        url = cluster.start()
        print("a stock PostgreSQL of the soak's own: " + ", ".join(
            f"{name} {value}" for name, value in cluster.settings().items()), flush=True)
    os.environ["ATP_BENCH_DATABASE_URL"] = url
    arguments = ["--minutes", str(options.minutes), "--mix", "soak", "--daemons", "2",
                 "--workers", "2", "--retention", str(RETENTION_SECONDS),
                 "--json", ".bench/soak.json"]
    arguments += (["--rate", str(options.rate)] if options.rate
                  else ["--fraction", str(options.fraction)])
    sys.argv = ["bench.stream", *arguments]
    from bench import stream

    try:
        result = stream.main()
    finally:
        if cluster is not None:
            from django.db import connections

            connections.close_all()
            cluster.stop()
    sys.exit(0 if verdict(result) else 1)


def verdict(result):
    """Print whether the soak passed; return it."""
    bounded = result["tasks_max"] <= result["tasks_bound"]
    limit = P99_GROWTH_LIMIT * result["first_minutes_wait"]["p99"]
    steady = result["worst_later_minute_p99"] <= limit
    print(f"\nretention kept pace: {'yes' if bounded else 'NO'} (at most "
          f"{result['tasks_max']:,} rows, bound {result['tasks_bound']:,.0f})")
    print(f"p99 wait steady: {'yes' if steady else 'NO'} (worst later minute "
          f"{result['worst_later_minute_p99']:.1f} ms, limit {limit:.1f} ms = "
          f"{P99_GROWTH_LIMIT} x the first two minutes')")
    worst, cpus = result["worst_later_minute"], os.cpu_count()
    print(f"the worst later minute ({worst}) by 10 s, and where the CPU went "
          f"(CPU seconds; {cpus} CPUs have {10 * cpus} in 10 s):")
    for window in result["per_10s"]:
        if 60 * (worst - 1) <= window["from_s"] < 60 * worst:
            spent = ", ".join(f"{group} {seconds:.1f}"
                              for group, seconds in window.get("cpu_seconds", {}).items())
            print(f"  from {window['from_s']} s: p50 {window['p50']:.1f} ms, p99 "
                  f"{window['p99']:.1f} ms; {spent}")
    return bounded and steady


if __name__ == "__main__":
    main()
