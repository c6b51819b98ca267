"""``make chaos``: daemons killed at random while an operator steers tasks at random.

    python -m tests.chaos [--daemons 3] [--tasks 3000] [--duration 120] [--workers 2]

On a PostgreSQL or MariaDB/MySQL database of its own (``ATP_CHAOS_DATABASE_URL``,
default ``postgres://postgres@127.0.0.1:5432/atp_chaos``, dropped and created anew;
``make chaos`` runs it on each server that answers), N daemons
run thousands of tasks whose handlers also crash, fail, time out and start processes
of their own. Every 2 s one daemon, picked at random, is SIGKILLed and a new one
started; meanwhile an operator thread cancels, re-enqueues, pauses and resumes tasks
at random. The invariants are checked every few seconds while it runs. Then the
killing and steering stop, paused tasks are resumed, and every task must end. At the
end:

- the queue's invariants hold, settled (``atp.invariants``);
- no task ran twice at once: each attempt holds a lock named after its task, and a
  second attempt running at the same time would have found it taken (the ledger of
  attempt starts and ends is counted too);
- every task is FINISHED, FAILED or CANCELLED;
- no process a handler started outlived its attempt;
- fresh tasks still drain.

It prints its figures and exits 1 if anything did not hold.
"""

import argparse
import collections
import os
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/atp_chaos"
KILL_EVERY_SECONDS = 2.0
CHECK_EVERY_SECONDS = 5.0
OPERATOR_PAUSE_SECONDS = 0.02
#: Daemons notice a dead one within seconds, so that killed tasks come back soon.
TIMERS = {
    "ATP_HEARTBEAT_INTERVAL_SECONDS": 0.5,
    "ATP_DAEMON_TIMEOUT_SECONDS": 4.0,
    "ATP_WORKER_KILL_GRACE_SECONDS": 0.5,
    "ATP_POLL_INTERVAL_SECONDS": 0.5,
}
#: The kinds of task, and how many of each in a hundred.
KINDS = {"quick": 55, "crash": 12, "fail": 10, "timeout": 5, "spawn": 8, "slow": 10}


def set_up(url):
    from bench.database import recreate

    if not recreate(url):
        raise SystemExit(f"chaos runs on a PostgreSQL or MariaDB/MySQL server, not {url}")
    os.environ["ATP_TEST_DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


class Daemons:
    """N atpd processes, one killed and replaced at a time."""

    def __init__(self, directory, count, workers):
        from tests.processes import Daemon

        self.start = lambda: Daemon(directory, "--workers", workers, "--log-level", "WARNING",
                                    **TIMERS)
        self.running = [self.start() for _ in range(count)]
        self.killed = 0
        self.all = list(self.running)

    def kill_one(self):
        victim = random.choice(self.running)
        victim.signal(signal.SIGKILL)
        victim.process.wait()
        self.running.remove(victim)
        self.killed += 1
        replacement = self.start()
        self.running.append(replacement)
        self.all.append(replacement)

    def stop(self):
        for daemon in self.running:
            daemon.signal(signal.SIGTERM)
        for daemon in self.running:
            daemon.wait(120)
        for daemon in self.all:
            daemon.stop()

    def errors(self):
        """Return the lines of the daemons' logs that report a bug (not a chaos effect)."""
        return [line for daemon in self.all for line in daemon.output().splitlines()
                if "Traceback" in line or "unexpected error" in line]


class Operator(threading.Thread):
    """Cancels, re-enqueues, pauses and resumes tasks at random until told to stop.

    Mostly what a task's state allows (so that pauses meet running tasks), sometimes
    anything, which the verbs must refuse cleanly.
    """

    VERBS = ("cancel", "reenqueue", "pause", "resume")
    FITTING = {
        "ACCEPTED": ("cancel",), "SCHEDULED": ("cancel", "reenqueue"),
        "RUNNING": ("pause", "pause", "cancel", "reenqueue"),
        "PAUSED": ("resume", "resume", "cancel", "reenqueue"),
        "FAILED": ("reenqueue",), "CANCELLED": ("reenqueue",),
    }

    def __init__(self, seed):
        super().__init__(name="chaos-operator", daemon=True)
        self.random = random.Random(seed)
        self.stopping = threading.Event()
        self.done = collections.Counter()
        self.refused = collections.Counter()
        self.failed = []

    def run(self):
        from django.db import connections

        from atp import engine
        from atp.exceptions import InvalidTransition, TaskAlreadyExists, TaskNotFound
        from atp.models import Instance

        try:
            while not self.stopping.is_set():
                # Half of them in flight: few tasks are, at any moment, of thousands.
                tasks = Instance.objects.order_by("?").values_list("pk", "status")
                picked = [*tasks.filter(status__in=("SCHEDULED", "RUNNING", "PAUSED"))[:10],
                          *tasks.filter(status__in=self.FITTING)[:10]]
                for pk, status in picked:
                    fitting = self.FITTING[status] if self.random.random() < 0.9 else self.VERBS
                    verb = self.random.choice(fitting)
                    try:
                        getattr(engine, verb)(pk, by="chaos-operator")
                    except (InvalidTransition, TaskAlreadyExists, TaskNotFound):
                        self.refused[verb] += 1
                    except Exception as exc:  # a bug: reported at the end
                        self.failed.append(f"{verb} of task #{pk}: {exc!r}")
                    else:
                        self.done[verb] += 1
                    time.sleep(OPERATOR_PAUSE_SECONDS)
        finally:
            connections.close_all()


def enqueue_tasks(count, directory):
    import atp

    atp.register_task_type("chaos.work", "tests.handlers.chaos", timeout=2, max_restarts=3)
    kinds = [kind for kind, share in KINDS.items() for _ in range(share)]
    inputs = []
    for _ in range(count):
        kind = random.choice(kinds)
        seconds = {"slow": random.uniform(0.5, 1.5)}.get(kind, random.uniform(0.01, 0.2))
        inputs.append({"directory": str(directory), "kind": kind, "seconds": seconds})
    for start in range(0, count, 500):
        atp.enqueue_many("chaos.work", inputs[start:start + 500],
                         priority=random.randint(-2, 2))


def resume_everything_paused():
    from atp import engine
    from atp.exceptions import InvalidTransition
    from atp.models import Instance

    for pk in Instance.objects.filter(status="PAUSED").values_list("pk", flat=True):
        try:
            engine.resume(pk, by="chaos-operator")
        except InvalidTransition:
            pass


def wait_for_the_end(timeout):
    """Wait until every task ended, resuming paused ones; return the live count left."""
    from atp.models import Instance
    from atp.states import LIVE

    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        resume_everything_paused()
        live = Instance.objects.filter(status__in=LIVE).count()
        if not live:
            return 0
        time.sleep(1)
    return Instance.objects.filter(status__in=LIVE).count()


def ledger_figures(directory):
    starts, ends = collections.Counter(), collections.Counter()
    path = directory / "ledger"
    for line in path.read_text().splitlines() if path.exists() else []:
        event, pk, attempt, _ = line.split()
        (starts if event == "start" else ends)[(int(pk), int(attempt))] += 1
    twice = [key for key, count in starts.items() if count > 1]
    return len(starts), len(ends), twice


def spawned_survivors(directory):
    """Return the processes handlers started that still run (not zombies)."""
    import psutil

    alive = []
    for path in directory.glob("*.spawned"):
        try:
            process = psutil.Process(int(path.read_text()))
            if process.status() != psutil.STATUS_ZOMBIE and "sleep" in process.name():
                alive.append(process.pid)
        except (psutil.NoSuchProcess, ValueError):
            continue
    return alive


def drain_fresh_tasks(directory, count, workers):
    """Enqueue ``count`` quick tasks for a fresh daemon; return (seconds, all finished)."""
    import atp
    from atp.models import Instance
    from tests.processes import Daemon

    fresh = atp.enqueue_many("chaos.work", [
        {"directory": str(directory), "kind": "quick", "seconds": 0} for _ in range(count)])
    began = time.monotonic()
    daemon = Daemon(directory, "--burst", "--workers", workers, "--log-level", "WARNING",
                    **TIMERS)
    daemon.wait(300)
    seconds = time.monotonic() - began
    finished = Instance.objects.filter(pk__in=[t.pk for t in fresh], status="FINISHED").count()
    return seconds, finished == count


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--daemons", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--duration", type=float, default=120, help="seconds of chaos")
    parser.add_argument("--seed", type=int, default=None)
    options = parser.parse_args()
    seed = options.seed if options.seed is not None else random.randrange(2**32)
    random.seed(seed)
    set_up(os.environ.get("ATP_CHAOS_DATABASE_URL", DEFAULT_URL))

    from atp.invariants import check_queue
    from atp.models import Instance, LogRecord

    problems = []
    directory = Path(tempfile.mkdtemp(prefix="atp-chaos-"))
    began = time.monotonic()
    enqueue_tasks(options.tasks, directory)
    daemons = Daemons(directory, options.daemons, options.workers)
    operator = Operator(seed)
    operator.start()
    checks = 0
    next_kill = next_check = time.monotonic()
    while time.monotonic() - began < options.duration:
        now = time.monotonic()
        if now >= next_kill:
            daemons.kill_one()
            next_kill = now + KILL_EVERY_SECONDS
        if now >= next_check:
            problems += [f"while running: {v}" for v in check_queue()]
            checks += 1
            next_check = now + CHECK_EVERY_SECONDS
        time.sleep(0.1)
    operator.stopping.set()
    operator.join(30)
    chaos_seconds = time.monotonic() - began
    left = wait_for_the_end(timeout=300)
    if left:
        problems.append(f"{left} task(s) never ended")
    daemons.stop()
    problems += [f"settled: {v}" for v in check_queue(settled=True)]
    overlaps = sorted(path.name for path in directory.glob("*.overlap"))
    problems += [f"ran twice at once: {name}" for name in overlaps]
    started, ended, twice = ledger_figures(directory)
    problems += [f"attempt started twice: task #{pk} attempt {attempt}" for pk, attempt in twice]
    survivors = spawned_survivors(directory)
    problems += [f"a handler's process outlived its attempt: pid {pid}" for pid in survivors]
    problems += [f"operator: {failure}" for failure in operator.failed]
    problems += [f"daemon log: {line}" for line in daemons.errors()]
    drain_seconds, drained = drain_fresh_tasks(directory, 500, options.workers)
    if not drained:
        problems.append("fresh tasks did not all finish")

    states = collections.Counter(Instance.objects.values_list("status", flat=True))
    restarts = sum(Instance.objects.values_list("restarts", flat=True))
    timeouts = LogRecord.objects.filter(message__contains="time-out after").count()
    print(f"chaos: seed {seed}, {options.tasks} tasks, {options.daemons} daemons of "
          f"{options.workers} workers, {chaos_seconds:.0f} s of chaos")
    print(f"  daemons SIGKILLed: {daemons.killed}; invariant checks while running: {checks}")
    print("  operator: " + ", ".join(
        f"{verb} {operator.done[verb]} done / {operator.refused[verb]} refused"
        for verb in Operator.VERBS))
    print(f"  attempts started: {started}, ended normally: {ended}; restarts: {restarts}; "
          f"time-outs: {timeouts}")
    print("  at the end: " + ", ".join(f"{count} {state}" for state, count in sorted(states.items())))
    print(f"  500 fresh tasks drained in {drain_seconds:.1f} s "
          f"({500 / drain_seconds:.0f} tasks/s, start-up included)")
    if problems:
        print(f"FAILED: {len(problems)} problem(s)")
        for problem in problems[:50]:
            print(f"  {problem}")
        print(f"  (the daemons' logs and the ledger are in {directory})")
        return 1
    print("OK: invariants hold, no task ran twice at once, every task ended, "
          "no handler's process outlived its attempt, fresh tasks drain")
    return 0


if __name__ == "__main__":
    sys.exit(main())
