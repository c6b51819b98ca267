"""The benchmark's handlers."""

import time


def noop(task, inputs):
    return None


def work(task, inputs):
    """Real work, briefly: progress as it goes, two entries in the history, ~10 ms."""
    task.log("started working")
    for step in range(5):
        task.set_progress(step, 5, "working")
        time.sleep(0.002)
    task.log("done working")
    return {"steps": 5}


def fail_first(task, inputs):
    """Fail the first attempt (retried by the type's policy), then succeed."""
    if task.attempt == 1:
        raise RuntimeError("fails its first attempt")
    return None
