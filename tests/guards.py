"""Check the suite against the guards of the queue's transitions: remove each, a test must fail.

    python -m tests.guards [--database sqlite|postgres|mysql|orm|all] [--only TEXT] [--list]

A guard no test needs is a guard nobody checked. For every guard of a transition
(a status, an attempt, a lease holder, a stopped daemon, a held task) this copies the
project to a temporary directory, removes that one guard from the copy, and runs the
fast tests of the queue there; the run must fail. It prints one line per guard and
database, and exits 1 if a guard survived (no test failed without it). ``make guards``
runs it on SQLite, PostgreSQL and MariaDB/MySQL (``ATP_TEST_MYSQL_URL``) with their
engines, and on SQLite with the ORM forms (``orm``); it is not part of ``make test``.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
#: The tests that exercise the guards directly: the queue verbs and the worker's steps.
TESTS = ["tests/engine", "tests/daemon/test_execution.py", "tests/test_states.py",
         "tests/test_liveness.py",
         "tests/daemon/test_control.py::test_a_task_stuck_before_its_handler_starts_times_out_from_its_claim"]
POSTGRES_URL = os.environ.get("ATP_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test")
MYSQL_URL = os.environ.get("ATP_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
#: The longest one run of the tests may take; a mutant's run that takes longer failed.
RUN_TIMEOUT_SECONDS = 900
DATABASES = ("sqlite", "postgres", "mysql", "orm")


@dataclass(frozen=True)
class Guard:
    """One guard: where it is written, and the same code without it; ``count`` is how many
    times it is written there (statements that repeat a step repeat its guard: each is
    removed)."""

    name: str
    path: str
    guarded: str
    unguarded: str
    databases: tuple = DATABASES
    count: int = 1


HOT = ("postgres",)  # the PostgreSQL engine's single statements
LITE = ("sqlite",)  # the SQLite engine's statements
MY = ("mysql",)  # the MariaDB/MySQL engine's statements and decisions
ORM = ("orm",)  # the ORM forms of the verbs the engines run (ATP_ENGINE = "orm")
#: Guards against a race between two transactions' statements, which SQLite's one
#: writer at a time rules out.
RACES = ("postgres",)
#: The statements of the PostgreSQL, SQLite and MariaDB/MySQL engines.
PG = "atp/engine/statements/postgresql.sql"
LITE_SQL = "atp/engine/statements/sqlite.sql"
MY_SQL = "atp/engine/statements/mysql.sql"

GUARDS = [
    # The compare-and-set behind every state change.
    Guard("move: status", "atp/engine/transitions.py",
          "filter(pk=pk, status__in=sources)", "filter(pk=pk)"),
    Guard("move: attempt", "atp/engine/transitions.py",
          "rows = rows.filter(attempt=attempt)", "pass"),
    # Claims.
    Guard("claim: task is ACCEPTED (hot)", PG,
          "ranked.instance_id\n        AND CASE WHEN i.status IN ('ACCEPTED') THEN true ELSE false END",
          "ranked.instance_id", HOT, 5),
    Guard("claim: row unleased (hot)", PG,
          "WHERE daemon_id IS NULL AND paused_since IS NULL", "WHERE paused_since IS NULL", HOT,
          6),
    Guard("claim: row not held (hot)", PG,
          "WHERE daemon_id IS NULL AND paused_since IS NULL", "WHERE daemon_id IS NULL", HOT, 6),
    Guard("claim: daemon not stopped (hot)", PG,
          "), alive AS (\n    SELECT id FROM atp_daemon WHERE id = %(daemon)s AND stopped IS NULL",
          "), alive AS (\n    SELECT id FROM atp_daemon WHERE id = %(daemon)s", HOT, 4),
    Guard("claim: task is ACCEPTED (lite)", LITE_SQL,
          "json_each(%(keys)s)) AND status IN ('ACCEPTED')", "json_each(%(keys)s))", LITE),
    Guard("claim: row unleased (lite)", LITE_SQL,
          "WHERE daemon_id IS NULL AND paused_since IS NULL AND not_before <= %(now)s",
          "WHERE paused_since IS NULL AND not_before <= %(now)s", LITE, 3),
    Guard("claim: row not held (lite)", LITE_SQL,
          "WHERE daemon_id IS NULL AND paused_since IS NULL AND not_before <= %(now)s",
          "WHERE daemon_id IS NULL AND not_before <= %(now)s", LITE, 3),
    Guard("claim: daemon not stopped (lite)", LITE_SQL,
          "WHERE id = %s AND stopped IS NULL", "WHERE id = %s", LITE),
    Guard("claim: task is ACCEPTED", "atp/engine/claim.py",
          "good = [pk for pk in pks if states.get(pk) == Status.ACCEPTED]", "good = list(pks)",
          ORM),
    Guard("claim: row unleased", "atp/engine/claim.py",
          "daemon__isnull=True, paused_since__isnull=True, not_before__lte=Now(),",
          "paused_since__isnull=True, not_before__lte=Now(),", ORM),
    Guard("claim: row not held", "atp/engine/claim.py",
          "daemon__isnull=True, paused_since__isnull=True, not_before__lte=Now(),",
          "daemon__isnull=True, not_before__lte=Now(),", ORM),
    Guard("claim: daemon not stopped", "atp/engine/orm.py",
          "Daemon.objects.filter(pk=daemon.pk, stopped__isnull=True)",
          "Daemon.objects.filter(pk=daemon.pk)", ORM),
    Guard("claim: concurrency counts leases", "atp/engine/orm.py",
          "Task.objects.filter(type_id__in=limited, daemon__isnull=False)",
          "Instance.objects.filter(type_id__in=limited, status__in=IN_FLIGHT)", ORM),
    # A worker's start and finish.
    Guard("start: attempt (hot)", PG,
          "AND i.attempt = %(attempt)s\n    RETURNING i.id, i.type_id",
          "\n    RETURNING i.id, i.type_id", HOT),
    Guard("start: SCHEDULED (hot)", PG,
          "WHERE i.id = %(pk)s AND i.status = 'SCHEDULED'", "WHERE i.id = %(pk)s", HOT),
    Guard("finish: attempt (hot)", PG,
          "FROM leased WHERE i.id = leased.instance_id AND i.attempt = %(attempt)s",
          "FROM leased WHERE i.id = leased.instance_id", HOT),
    Guard("finish: running or paused (hot)", PG,
          "        AND i.status IN ('PAUSED', 'RUNNING')\n", "", HOT),
    Guard("finish: leased (hot)", PG,
          "WHERE instance_id = %(pk)s AND daemon_id IS NOT NULL\n    FOR UPDATE",
          "WHERE instance_id = %(pk)s\n    FOR UPDATE", HOT),
    Guard("start: attempt (lite)", LITE_SQL,
          "AND status = 'SCHEDULED' AND attempt = %(attempt)s\nRETURNING",
          "AND status = 'SCHEDULED' AND %(attempt)s IS NOT NULL\nRETURNING", LITE),
    Guard("start: SCHEDULED (lite)", LITE_SQL,
          "WHERE id = %(pk)s AND status = 'SCHEDULED' AND attempt", "WHERE id = %(pk)s AND attempt",
          LITE),
    Guard("finish: attempt (lite)", LITE_SQL,
          "AND attempt = %(attempt)s AND status IN ('PAUSED', 'RUNNING');",
          "AND %(attempt)s IS NOT NULL AND status IN ('PAUSED', 'RUNNING');", LITE),
    Guard("finish: running or paused (lite)", LITE_SQL,
          " AND status IN ('PAUSED', 'RUNNING');", ";", LITE),
    Guard("finish: leased (lite)", LITE_SQL,
          "DELETE FROM atp_task WHERE instance_id = %s AND daemon_id IS NOT NULL;",
          "DELETE FROM atp_task WHERE instance_id = %s;", LITE),
    # The supervisor's batched ends (settle).
    Guard("settle: attempt (hot)", PG,
          "AND prior.id = b.pk AND i.attempt = b.attempt AND (", "AND prior.id = b.pk AND (", HOT, 3),
    Guard("settle: finished from running or paused (hot)", PG,
          "(b.status = 'FINISHED' AND i.status IN ('PAUSED', 'RUNNING'))",
          "(b.status = 'FINISHED')", HOT, 3),
    Guard("settle: leased (hot)", PG,
          "held.instance_id = b.pk AND held.daemon_id IS NOT NULL", "held.instance_id = b.pk",
          HOT, 3),
    Guard("settle: attempt (lite)", LITE_SQL,
          "AND attempt = %(attempt)s\n    AND status IN", "AND %(attempt)s IS NOT NULL\n    AND status IN",
          LITE, 2),
    Guard("settle: finished from its sources (lite)", LITE_SQL,
          "\n    AND status IN ('PAUSED', 'RUNNING')\n", "\n", LITE),
    Guard("settle: failed from its sources (lite)", LITE_SQL,
          "\n    AND status IN ('PAUSED', 'RUNNING', 'SCHEDULED')\n", "\n", LITE),
    # The starts of prefetched tasks, written by the settle.
    Guard("settle start: from scheduled (hot)", PG,
          "(b.started_ago IS NOT NULL AND i.status = 'SCHEDULED'",
          "(b.started_ago IS NOT NULL", HOT, 3),
    Guard("settle start: from scheduled (lite)", LITE_SQL,
          "WHERE id = %(pk)s AND attempt = %(attempt)s AND status = 'SCHEDULED'\n",
          "WHERE id = %(pk)s AND attempt = %(attempt)s\n", LITE),
    Guard("settle start: attempt (lite)", LITE_SQL,
          "WHERE id = %(pk)s AND attempt = %(attempt)s AND status = 'SCHEDULED'\n",
          "WHERE id = %(pk)s AND %(attempt)s IS NOT NULL AND status = 'SCHEDULED'\n", LITE),
    Guard("settle: leased (lite)", LITE_SQL,
          "WHERE instance_id = %(pk)s AND daemon_id IS NOT NULL)",
          "WHERE instance_id = %(pk)s)", LITE, 3),
    Guard("claim: task is ACCEPTED (my)", "atp/engine/mysql.py",
          "if pk in found and found[pk].status in CLAIMABLE]", "if pk in found]", MY),
    Guard("claim: row unleased (my)", MY_SQL,
          "WHERE daemon_id IS NULL AND paused_since IS NULL AND not_before <= %(now)s",
          "WHERE paused_since IS NULL AND not_before <= %(now)s", MY),
    Guard("claim: row not held (my)", MY_SQL,
          "WHERE daemon_id IS NULL AND paused_since IS NULL AND not_before <= %(now)s",
          "WHERE daemon_id IS NULL AND not_before <= %(now)s", MY),
    # Expiry: no claim takes an expired task; the sweep leaves one a claim took.
    Guard("claim: not expired (hot)", PG,
          "AND (expires IS NULL OR expires > STATEMENT_TIMESTAMP())", "AND true", HOT, 6),
    Guard("claim: not expired (lite)", LITE_SQL,
          "AND (expires IS NULL OR expires > %(now)s)", "AND true", LITE, 3),
    Guard("claim: not expired (my)", MY_SQL,
          "AND (expires IS NULL OR expires > %(now)s)", "AND true", MY),
    Guard("claim: not expired", "atp/engine/claim.py",
          ".filter(Q(expires__isnull=True) | Q(expires__gt=Now()))", "", ORM),
    Guard("expire: claimed before it expired", "atp/engine/maintenance.py",
          "if not locked.has_row or locked.is_leased or locked.status != Status.ACCEPTED:",
          "if not locked.has_row:", RACES),
    # Semaphores: a slot of each, counted from the leases; no engine's claim takes a gated
    # task; a key's tasks take turns.
    Guard("semaphores: a slot of each or none", "atp/engine/semaphores.py",
          "if any(self.left[pk] is not None and self.left[pk] < 1 for pk in semaphore_ids):",
          "if False:"),
    Guard("semaphores: holders are the leased", "atp/engine/semaphores.py",
          "Task.objects.filter(daemon__isnull=False, instance__holds__semaphore_id__in=",
          "Task.objects.filter(instance__holds__semaphore_id__in="),
    Guard("semaphores: a key's tokens spent", "atp/engine/orm.py", "    gates.spend()\n", ""),
    Guard("claim: no gated task (hot)", PG, ") AND NOT gated", ")", HOT, 6),
    Guard("claim: no gated task (lite)", LITE_SQL, ") AND NOT gated", ")", LITE, 3),
    Guard("claim: no gated task (my)", MY_SQL, ") AND gated = 0", ")", MY),
    Guard("claim: no gated task", "atp/engine/claim.py",
          "        waiting = waiting.filter(gated=False)\n", "", ORM),
    Guard("replace: only a waiting task", "atp/engine/enqueue.py",
          "if lease is not None or locked.status != Status.ACCEPTED:", "if False:"),
    Guard("claim: daemon not stopped (my)", MY_SQL,
          "WHERE id = %s AND stopped IS NULL", "WHERE id = %s", MY),
    Guard("claim: concurrency counts leases (my)", MY_SQL,
          "WHERE daemon_id IS NOT NULL AND JSON_CONTAINS(%s, CAST(type_id AS CHAR))",
          "WHERE JSON_CONTAINS(%s, CAST(type_id AS CHAR))", MY),
    Guard("start: attempt (my)", MY_SQL,
          "AND status = 'SCHEDULED' AND attempt = %(attempt)s;",
          "AND status = 'SCHEDULED' AND %(attempt)s IS NOT NULL;", MY),
    Guard("start: SCHEDULED (my)", MY_SQL,
          "WHERE id = %(pk)s AND status = 'SCHEDULED' AND attempt", "WHERE id = %(pk)s AND attempt",
          MY),
    Guard("finish: attempt (my)", MY_SQL,
          "WHERE id = %(pk)s AND attempt = %(attempt)s AND status IN ('PAUSED', 'RUNNING');",
          "WHERE id = %(pk)s AND %(attempt)s IS NOT NULL AND status IN ('PAUSED', 'RUNNING');", MY),
    Guard("finish: running or paused (my)", MY_SQL,
          " AND status IN ('PAUSED', 'RUNNING');", ";", MY),
    Guard("finish: leased (my)", MY_SQL,
          "DELETE FROM atp_task WHERE instance_id = %s AND daemon_id IS NOT NULL;",
          "DELETE FROM atp_task WHERE instance_id = %s;", MY),
    Guard("settle: attempt (my)", "atp/engine/mysql.py",
          "            if attempt != outcome.attempt:\n", "            if False:\n", MY),
    Guard("settle: from its sources (my)", "atp/engine/mysql.py",
          "elif status == Status.RUNNING or current not in ENDS_FROM.get(status, ()):",
          "elif status == Status.RUNNING or status not in ENDS_FROM:", MY),
    Guard("settle start: from scheduled (my)", "atp/engine/mysql.py",
          "if (outcome.started_ago is not None and current == Status.SCHEDULED\n",
          "if (outcome.started_ago is not None\n", MY),
    Guard("settle: leased (my)", MY_SQL,
          "\nWHERE t.daemon_id IS NOT NULL\nORDER BY t.instance_id FOR UPDATE",
          "\nORDER BY t.instance_id FOR UPDATE", MY),
    Guard("time-out from the claim (my)", MY_SQL,
          "t.deadline = %(now)s + INTERVAL j.timeout MICROSECOND", "t.deadline = NULL", MY),
    Guard("finish, fail: leased", "atp/engine/lifecycle.py",
          "if not queue_row(pk).filter(daemon__isnull=False).delete()[0]:",
          "if not queue_row(pk).delete()[0] and False:"),
    # Records written while a task runs.
    Guard("records: attempt runs", "atp/engine/records.py",
          'row["attempt"] == attempt and row["status"] in RUNS',
          'row["attempt"] == attempt'),
    Guard("progress: attempt", "atp/engine/records.py",
          "filter(pk=pk, status__in=RUNS, attempt=attempt)", "filter(pk=pk, status__in=RUNS)"),
    # Leases given up, taken away, held.
    Guard("release: lease holder", "atp/engine/lifecycle.py",
          'if locked.lease != getattr(daemon, "pk", daemon):', "if not locked.has_row:"),
    Guard("restart, hand back: leased", "atp/engine/lifecycle.py",
          "    if not locked.is_leased:\n        error = refusal(", "    if False:\n        error = refusal("),
    Guard("operator's end: keeps a lease", "atp/engine/lifecycle.py",
          "    if locked.has_row and not locked.is_leased:\n        queue_row(pk).delete()\n    return locked",
          "    if locked.has_row:\n        queue_row(pk).delete()\n    return locked"),
    Guard("re-enqueue: waits for the lease", "atp/engine/steering.py",
          "    if locked.is_leased:\n        return attempt  # its daemon",
          "    if False:\n        return attempt  # its daemon"),
    Guard("resume: held", "atp/engine/steering.py", "    if locked.is_held:\n", "    if False:\n"),
    Guard("run again: ended", "atp/engine/steering.py",
          "    if locked.status not in TERMINAL:\n", "    if False:\n"),
    Guard("run now: queued", "atp/engine/steering.py",
          "    if locked.status != Status.ACCEPTED:\n", "    if False:\n"),
    Guard("run now: delayed", "atp/engine/steering.py",
          "queue_row(pk).filter(not_before__gt=Now())", "queue_row(pk)"),
    Guard("delete: lease", "atp/engine/maintenance.py", "    if locked.is_leased:\n", "    if False:\n"),
    # Daemons.
    Guard("heartbeat: not stopped", "atp/engine/daemons.py",
          "Daemon.objects.filter(pk=pk_of(daemon), stopped__isnull=True)\n        .update(heartbeat",
          "Daemon.objects.filter(pk=pk_of(daemon))\n        .update(heartbeat"),
    Guard("reap: still silent", "atp/engine/daemons.py",
          "        rows = rows.filter(beats=beats)\n", ""),
    Guard("seal forgotten: pulse still silent", "atp/engine/batches.py",
          "Batch.objects.filter(pk=pk, sealed__isnull=True, beats=beats).update(sealed=Now())",
          "Batch.objects.filter(pk=pk, sealed__isnull=True).update(sealed=Now())"),
    Guard("watch: a counter that moved starts its time-out again", "atp/liveness.py",
          "before is not None and before[0] == counter", "before is not None"),
    Guard("let go: lease holder", "atp/engine/daemons.py",
          "    if locked.lease != pk_of(daemon):\n        return False\n", "", RACES),
    Guard("time-out from the claim", "atp/engine/claim.py",
          "daemon=daemon, claimed=now, deadline=deadline", "daemon=daemon, claimed=now",
          ORM),
    Guard("time-out from the claim (lite)", "atp/engine/sqlite.py",
          "_stamp(moment + instance.type.timeout)", "None", LITE),
    Guard("time-out from the claim (hot)", PG,
          ",\n        deadline = STATEMENT_TIMESTAMP() + ty.timeout", "", HOT, 5),
]


def copy_project(destination):
    """Copy the files git tracks (and new ones it does not ignore) to ``destination``."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=PROJECT_ROOT,
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()
    for name in listed:
        source = PROJECT_ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def remove(guard, root):
    path = root / guard.path
    text = path.read_text()
    if text.count(guard.guarded) != guard.count:
        raise SystemExit(f"guard {guard.name!r}: its code is not {guard.count} times in "
                         f"{guard.path}; update tests/guards.py to the code")
    path.write_text(text.replace(guard.guarded, guard.unguarded))


def run_tests(root, database):
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("ATP_TEST_DATABASE_URL", None)
    env.pop("ATP_TEST_ENGINE", None)
    if database == "postgres":
        env["ATP_TEST_DATABASE_URL"] = POSTGRES_URL
    elif database == "mysql":
        env["ATP_TEST_DATABASE_URL"] = MYSQL_URL
    elif database == "orm":  # SQLite, on the ORM forms of the verbs
        env["ATP_TEST_ENGINE"] = "orm"
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *TESTS],
            cwd=root, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired:
        # A mutant can make a test wait for a lock that is never let go: the suite did
        # not pass (a run of the pristine copy takes a minute or two).
        print(f"  (the tests on {database} ran past {RUN_TIMEOUT_SECONDS} s: stopped)",
              flush=True)
        return 1
    return result.returncode


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=[*DATABASES, "all"], default="all")
    parser.add_argument("--only", default="", help="check the guards whose name holds this")
    parser.add_argument("--list", action="store_true", help="list the guards and stop")
    options = parser.parse_args()
    guards = [g for g in GUARDS if options.only in g.name]
    if options.list:
        for guard in guards:
            print(f"{guard.name:40} {guard.path} ({', '.join(guard.databases)})")
        return 0
    databases = list(DATABASES) if options.database == "all" else [options.database]
    survivors = []
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="atp-guards-") as scratch:
        pristine = Path(scratch) / "pristine"
        copy_project(pristine)
        for database in databases:
            if run_tests(pristine, database) != 0:
                raise SystemExit(f"the tests fail on {database} with every guard in place")
        for guard in guards:
            for database in (d for d in databases if d in guard.databases):
                root = Path(scratch) / "mutant"
                shutil.rmtree(root, ignore_errors=True)
                shutil.copytree(pristine, root)
                remove(guard, root)
                caught = run_tests(root, database) != 0
                print(f"{'caught  ' if caught else 'SURVIVED'} {guard.name:40} {database}",
                      flush=True)
                if not caught:
                    survivors.append((guard.name, database))
    print(f"{len(guards)} guards, {len(survivors)} survived, in {time.monotonic() - began:.0f} s")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
