"""Task functions of the Django Tasks scenarios (tests/djangotasks), run by real daemons.

Signal receivers note each signal in the file ``ATP_TEST_SIGNAL_LOG`` names (one line:
signal, result id, status), in whichever process sends it.
"""

import asyncio
import os
import time
from pathlib import Path

from atp.djangotasks.compat import framework, task_enqueued, task_finished, task_started

task = framework.task


def _note(name):
    def receiver(sender, task_result, **kwargs):
        path = os.environ.get("ATP_TEST_SIGNAL_LOG")
        if path:
            with open(path, "a") as log:
                log.write(f"{name} {task_result.id} {task_result.status}\n")
    return receiver


# Strong references: the receivers live as long as the module.
RECEIVERS = {name: _note(name) for name in ("enqueued", "started", "finished")}
task_enqueued.connect(RECEIVERS["enqueued"])
task_started.connect(RECEIVERS["started"])
task_finished.connect(RECEIVERS["finished"])


@task()
def add(a, b):
    return a + b


@task()
def echo(*args, **kwargs):
    return {"args": list(args), "kwargs": kwargs}


@task(takes_context=True)
def which_attempt(context, label):
    return {"attempt": context.attempt, "id": context.task_result.id, "label": label}


@task()
async def add_later(a, b):
    await asyncio.sleep(0.01)
    return a + b


@task()
def wait_for(path, timeout=30):
    """Wait until the file ``path`` exists; return how long it took (s)."""
    began = time.monotonic()
    while not Path(path).exists():
        if time.monotonic() - began > timeout:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)
    return time.monotonic() - began


@task()
def fail_unless(path):
    """Raise ``ValueError`` unless the file ``path`` exists."""
    if not Path(path).exists():
        raise ValueError(f"{path} is missing")
    return "fine"


@task(takes_context=True)
def hang_on_first_attempt(context, pid_file):
    """On its first attempt, write the worker's pid to ``pid_file`` and hang."""
    if context.attempt == 1:
        # Whole or not at all: the test reads it as soon as it exists (written in place,
        # it once read it created and still empty).
        partial = Path(f"{pid_file}.partial")
        partial.write_text(str(os.getpid()))
        partial.rename(pid_file)
        time.sleep(120)
    return context.attempt


@task()
def mark(path, label):
    """Append ``label`` to the file ``path`` (the order tasks ran in)."""
    with open(path, "a") as out:
        out.write(f"{label}\n")
    return label


@task()
def raise_base(kind):
    """Raise ``SystemExit(3)`` or ``KeyboardInterrupt``: exceptions that are not ``Exception`` s."""
    if kind == "SystemExit":
        raise SystemExit(3)
    raise KeyboardInterrupt


@task()
def worker_pid():
    return os.getpid()
