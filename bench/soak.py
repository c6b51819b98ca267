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
benchmark, anything else, the hypervisor's steal), and what the server's log holds of
that minute (``server_waits``: slow statements, those that ended together as one wait,
the checkpoint under way). ``make soak`` runs it; its figures are in docs/performance.md.
"""

import argparse
import collections
import datetime
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
    sys.exit(0 if verdict(result, None if cluster is None else cluster.kept_log) else 1)


def verdict(result, server_log=None):
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
    if server_log is not None and server_log.exists():
        for line in server_waits(server_log, result["began"], worst):
            print(line)
    return bounded and steady


#: Slow statements that ended within this of the first of them are told as one wait they
#: shared.
TOGETHER_SECONDS = 0.05


def server_waits(log_path, began, minute):
    """Return lines saying what the server's log holds for ``minute`` of the stream (which
    began at ``began``, ISO; minute N is its seconds 60 (N - 1) to 60 N): the statements it
    logged as slow that ran in that minute, those that ended together told as one (a wait
    they shared: for the WAL's flush at commit, say), and the checkpoints under way."""
    from bench.cluster import SLOW_STATEMENT_MS, server_log_events

    start = datetime.datetime.fromisoformat(began)
    low, high = (start + datetime.timedelta(seconds=60 * minute + offset)
                 for offset in (-60, 0))
    events = server_log_events(log_path)
    checkpoints, began_at = [], None
    for when, kind, _, what in events:
        if kind == "checkpoint" and "starting" in what:
            began_at = (when, what)
        elif kind == "checkpoint" and began_at is not None:
            checkpoints.append((*began_at, when))
            began_at = None
    if began_at is not None:
        checkpoints.append((*began_at, datetime.datetime.max.replace(tzinfo=datetime.UTC)))
    under_way = [f"{what}, at {(since - start).total_seconds():.1f} s"
                 for since, what, until in checkpoints if since < high and until >= low]
    # Logged when they end: a statement ran in the minute if it ended after its start.
    slow = [(when, ms, what) for when, kind, ms, what in events if kind == "statement"
            and when >= low and when - datetime.timedelta(milliseconds=ms) < high]
    lines = [f"the server's log in that minute: {len(slow)} statement(s) over "
             f"{SLOW_STATEMENT_MS} ms" + "".join(f"; a checkpoint under way ({checkpoint})"
                                                 for checkpoint in under_way)]
    groups = []
    for when, ms, what in slow:
        if groups and (when - groups[-1][0][0]).total_seconds() <= TOGETHER_SECONDS:
            groups[-1].append((when, ms, what))
        else:
            groups.append([(when, ms, what)])
    for group in groups:
        # A statement by its first words: the engine's say which (WITH kind: an enqueue).
        kinds = collections.Counter(" ".join(what.split()[:2 if what.startswith("WITH") else 1])
                                    for _, _, what in group)
        at = (group[0][0] - start).total_seconds()
        said = ", ".join(f"{kind} x{count}" for kind, count in kinds.items())
        longest = max(ms for _, ms, _ in group)
        lines.append(f"  at {at:.1f} s: {len(group)} ended together, after up to {longest:.0f} ms "
                     f"({said})" if len(group) > 1 else f"  at {at:.1f} s: one of {longest:.0f} ms "
                     f"({said})")
    return lines


if __name__ == "__main__":
    main()
