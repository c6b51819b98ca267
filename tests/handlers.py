"""Handlers the tests register as task types (module-level, as handlers must be).

Besides well-behaved ones, the poison handlers a daemon must survive: each of them
breaks its worker a different way.
"""

import ctypes
import fcntl
import os
import signal
import sys
import time
from os import getpid  # a re-exported function: must never resolve as a handler
from pathlib import Path

import atp


def noop(task, inputs):
    return None


def echo(task, inputs):
    return inputs


def report_pid(task, inputs):
    return {"pid": getpid()}


def report_clock(task, inputs):
    """Return when it ran, on this host's monotonic clock: the order tasks really ran in."""
    return {"ns": time.monotonic_ns()}


@atp.task_type("tests.declared", timeout=5, max_restarts=1, description="declared in code")
def declared(task, inputs):
    return "declared"


def sleep(task, inputs):
    seconds = float(inputs.get("seconds", 1))
    steps = max(1, int(seconds / 0.05))
    for step in range(steps):
        if inputs.get("progress"):
            task.set_progress(step, steps)
        time.sleep(seconds / steps)
    return {"slept": seconds, "pid": getpid()}


def exclusive_sleep(task, inputs):
    """Sleep while holding an exclusive lock named after the task (or ``inputs["lock"]``):
    a second holder running at the same time cannot take it, and leaves a mark saying
    so. The kernel drops the lock when the process dies, however it dies."""
    directory = Path(inputs["directory"])
    name = inputs.get("lock", task.id)
    lock = open(directory / f"{name}.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        (directory / f"{task.id}-{task.attempt}.overlap").write_text(str(name))
        raise RuntimeError(f"another holder of lock {name} is running") from None
    with open(directory / "attempts.log", "a") as log:
        log.write(f"{task.id} {task.attempt}\n")
    time.sleep(float(inputs.get("seconds", 0.1)))
    return {"pid": getpid()}


def fail(task, inputs):
    raise ValueError(inputs.get("message", "poison: the handler raised"))


def exit_3(task, inputs):
    sys.exit(3)


#: What ``raise_base_exception`` raises: exceptions that are not ``Exception`` s.
BASE_EXCEPTIONS = {
    "SystemExit": lambda: SystemExit(3),
    "KeyboardInterrupt": KeyboardInterrupt,
    "GeneratorExit": GeneratorExit,
}


def raise_base_exception(task, inputs):
    """Raise the ``BaseException`` that is not an ``Exception`` named ``inputs["kind"]``,
    as ``sys.exit(3)`` or a Ctrl-C in the handler's own code would."""
    raise BASE_EXCEPTIONS[inputs["kind"]]()


def hard_exit_0(task, inputs):
    os._exit(0)


def abort(task, inputs):
    os.abort()


def segfault(task, inputs):
    ctypes.string_at(0)


def killed(task, inputs):
    """Die as the kernel's out-of-memory killer would end it."""
    os.kill(os.getpid(), signal.SIGKILL)


def spin(task, inputs):
    while True:
        pass


def ignore_sigterm(task, inputs):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(0.05)


def hog_memory(task, inputs):
    """Keep ``megabytes`` of memory in the worker after the task ends."""
    hog_memory.kept = bytearray(int(inputs["megabytes"]) * 2**20)
    return {"pid": getpid()}


def log_and_respond(task, inputs):
    task.log(f"working on {task.identifier}")
    task.set_progress(1, 2, "halfway")
    task.set_response(b"\x00partial", "application/octet-stream")
    if inputs.get("return") is not None:
        return inputs["return"]
    return None


def return_unstorable(task, inputs):
    return object()


def busy_progress(task, inputs):
    """Report progress as fast as it can: nearly always inside a database write."""
    deadline = time.monotonic() + float(inputs["seconds"])
    done = 0
    while time.monotonic() < deadline:
        done += 1
        task.set_progress(done)
    return {"writes": done}


def spawn_stubborn_child(task, inputs):
    """Start a process that ignores SIGTERM, note its pid, then run forever."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    )])
    Path(inputs["pid_file"]).write_text(str(child.pid))
    while True:
        time.sleep(0.05)


def fail_with_nul(task, inputs):
    """Fail with a message no PostgreSQL text column stores."""
    raise ValueError("a NUL\x00byte in the message")


def return_lone_surrogate(task, inputs):
    """Return text that is not valid Unicode (half of a surrogate pair), as text or JSON."""
    if inputs.get("json"):
        return {"text": "\udc80"}
    return "half a pair: \ud800"


def return_bytes(task, inputs):
    return b"x" * int(inputs["bytes"])


def set_big_response(task, inputs):
    task.set_response(b"x" * int(inputs["bytes"]))
    return None


def spawn_sleep(task, inputs):
    """Start ``sleep 600``, note its pid, then run until stopped."""
    import subprocess

    child = subprocess.Popen(["sleep", "600"])
    Path(inputs["pid_file"]).write_text(str(child.pid))
    while True:
        time.sleep(0.05)


def chaos(task, inputs):
    """A task of ``make chaos`` (tests/chaos.py), one of several kinds.

    It holds an exclusive lock named after the task while it runs: a second attempt
    running at the same time cannot take it and leaves a mark saying so. The kernel
    drops the lock when the process dies, however it dies. Each start and end goes to
    a ledger.
    """
    directory = Path(inputs["directory"])
    lock = open(directory / f"{task.id}.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        (directory / f"{task.id}-{task.attempt}.overlap").write_text("")
        raise RuntimeError("another attempt of this task is running") from None
    _ledger(directory, "start", task)
    kind = inputs["kind"]
    if kind == "crash" and task.attempt % 2:
        os._exit(3)  # the worker dies on odd attempts: restarted, then it succeeds
    if kind == "fail":
        raise ValueError("chaos: this one fails")
    if kind == "timeout":
        time.sleep(3600)  # beyond its type's time-out: stopped, restarted, failed
    if kind == "spawn":
        import subprocess

        child = subprocess.Popen(["sleep", "600"])
        (directory / f"{task.id}-{task.attempt}.spawned").write_text(str(child.pid))
    time.sleep(float(inputs["seconds"]))
    _ledger(directory, "end", task)
    return {"attempt": task.attempt}


def _ledger(directory, event, task):
    with open(directory / "ledger", "a") as ledger:
        ledger.write(f"{event} {task.id} {task.attempt} {time.time():.6f}\n")


def spawn_and_return(task, inputs):
    """Start ``sleep 600`` (and one that leaves the group), note their pids, and return."""
    import subprocess

    children = [subprocess.Popen(["sleep", "600"]),
                subprocess.Popen(["sleep", "600"], start_new_session=True)]
    Path(inputs["pid_file"]).write_text(" ".join(str(child.pid) for child in children))
    return "left them running"


def gate(task, inputs):
    """On its first attempt, wait at a FIFO until a byte comes (the test opens the gate);
    later attempts pass at once. Writes ``"<pid> <fd>"`` to ``inputs["pid_file"]`` once it
    waits in ``read(fd)``, so a test can tell that wait apart from the worker's next one.
    """
    if task.attempt == 1:
        # Opened for writing too, a FIFO's read waits for data instead of seeing no writer.
        fd = os.open(inputs["fifo"], os.O_RDWR)
        try:
            # Written whole, then renamed: the test never reads it half written.
            written = Path(inputs["pid_file"] + ".new")
            written.write_text(f"{getpid()} {fd}")
            os.replace(written, inputs["pid_file"])
            os.read(fd, 1)
        finally:
            os.close(fd)
    return {"attempt": task.attempt}


def fail_then_succeed(task, inputs):
    """Fail while the handler has failed fewer than ``inputs["fails"]`` times before."""
    if task.execution_count < inputs["fails"]:
        raise ValueError(f"failure {task.execution_count + 1}")
    return {"retry_count": task.retry_count, "execution_count": task.execution_count}


def ask_for_retry(task, inputs):
    raise atp.Retry("not yet", countdown=inputs.get("countdown"))


def fail_for_good(task, inputs):
    raise atp.PermanentFailure("the input can never work")


def multiply(a, b, *, factor=1):
    """A plain function, for ``atp.defer``."""
    return {"product": a * b * factor}


def describe(moment, amounts):
    """A plain function taking what JSON alone would not round-trip."""
    return {"moment": moment.isoformat(), "types": [type(a).__name__ for a in amounts]}


def summarise(summary):
    """A batch's on-complete function (``atp.batch(summarise, ...)``)."""
    return {"done": summary["finished"], "of": summary["total"]}


def wait_for_file(task, inputs):
    """Wait until the file ``inputs["path"]`` exists (a test opens the way)."""
    while not os.path.exists(inputs["path"]):
        time.sleep(0.02)


# The message-resend pattern of docs/queue-features.md, with a dictionary for a model:
# a message is sent, then re-sent every ``every`` seconds until it is acknowledged, at
# most MAX_SENDS times, each send a named task enqueued by the one before.
MAX_SENDS = 5
MESSAGES = {}  # message id -> {"acknowledged": bool, "sends": [send numbers]}


def start_sending(message_id, every):
    """Send message ``message_id`` now and re-send it until acknowledged."""
    queue_send(message_id, 1, every, countdown=0)


def queue_send(message_id, send, every, countdown):
    try:
        atp.enqueue("tests.resend", {"message": message_id, "send": send, "every": every},
                    identifier=f"resend-{message_id}-{send}", countdown=countdown)
    except atp.exceptions.TaskAlreadyExists:
        pass  # that send is queued or done already: a message is never sent twice at once


def resend(task, inputs):
    message = MESSAGES[inputs["message"]]
    if message["acknowledged"]:
        return "acknowledged"
    message["sends"].append(inputs["send"])  # deliver(message)
    if inputs["send"] < MAX_SENDS:
        queue_send(inputs["message"], inputs["send"] + 1, inputs["every"],
                   countdown=inputs["every"])
    return f"send {inputs['send']}"


def collector_state(task, inputs):
    """Report how the worker's cyclic garbage collector is set (``atp.daemon.collector``)."""
    import gc

    return {"thresholds": list(gc.get_threshold()), "frozen": gc.get_freeze_count()}


def snooze(task, inputs):
    """Snooze ``inputs["seconds"]`` (0 by default) while the task snoozed fewer than
    ``inputs["times"]`` times (always without it); then return what the task saw."""
    inputs = inputs or {}
    if "times" not in inputs or task.snoozes < inputs["times"]:
        raise atp.Snooze(inputs.get("seconds", 0), f"not ready at attempt {task.attempt}")
    return {"attempt": task.attempt, "snoozes": task.snoozes,
            "execution_count": task.execution_count, "restarts": task.restarts}


def hold_locks(task, inputs):
    """Sleep holding an exclusive lock of each name in ``inputs["locks"]`` (in
    ``inputs["directory"]``), as a task holding those semaphores would use what they
    guard: a second holder of one at the same time cannot take it, and leaves a mark
    saying so. The kernel drops the locks when the process dies, however it dies."""
    directory = Path(inputs["directory"])
    held = []
    for name in inputs.get("locks", []):
        lock = open(directory / f"{name}.lock", "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            (directory / f"{task.id}-{task.attempt}.overlap").write_text(name)
            raise RuntimeError(f"another holder of {name} is running") from None
        held.append(lock)
    if "one_of" in inputs:  # a slot of a counting semaphore: any lock of these free
        for name in inputs["one_of"]:
            lock = open(directory / f"{name}.lock", "w")
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.close()
                continue
            held.append(lock)
            break
        else:
            (directory / f"{task.id}-{task.attempt}.overlap").write_text("one_of")
            raise RuntimeError("every slot is taken: one holder too many") from None
    time.sleep(float(inputs.get("seconds", 0.05)))
    return {"pid": getpid()}
