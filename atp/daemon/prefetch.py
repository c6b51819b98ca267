"""How many tasks a daemon takes ahead of its workers, and which worker gets which.

A worker that ends a task and waits for the supervisor's next database round before
it gets another spends most of its time waiting when tasks are short: the round
takes milliseconds, a no-op task a fraction of one. So each worker gets a short queue:
the task it runs, and behind it as many as it will finish, at its recent pace, by
the time the supervisor's next round can give it more. Those are *prefetched*:
claimed and leased (SCHEDULED), not started; each starts when its worker reaches it,
and its start is written with the supervisor's next round (dated when it began).

The queue is only as deep as the pace calls for: once tasks take longer than a round
no queue is made (the worker gets its next task when it is free, as without
prefetch), and nothing more is queued behind a task that already runs longer than
that, is paused or is being stopped. What was queued before it waits for it: the pace
is of the tasks that ran, not of those to come (see docs/daemon.md). ``--prefetch N``
caps the tasks queued behind each worker's running one; 0 turns prefetch off. A busy
worker's pipe never holds more than ``PIPE_BUDGET`` bytes of tasks, so that sending
them never blocks the supervisor; the tasks that do not fit wait in the supervisor.
"""

import math

from atp.states import Status

#: How fast the pace follows a shorter task than it expects (a longer one counts at once).
EASING = 0.1
#: How many rounds' worth of tasks a queue holds: a margin for a round slower than usual.
ROUNDS_AHEAD = 1.5
#: The most bytes of tasks a busy worker may have waiting in its pipe, unread: well under
#: what the pipe holds (about 200 KiB on Linux), so that handing tasks out never blocks
#: the supervisor on a worker busy running one.
PIPE_BUDGET = 96 * 1024
#: What a task weighs in the pipe besides its inputs and its texts (its row's other
#: values, ``atp.daemon.handoff``; its type's are sent once a message): about 120 bytes
#: pickled, counted generously. (Counted as 1,024, with nothing for the texts, it held a
#: busy worker's queue of no-op tasks to 94, under ``--prefetch``.)
TASK_OVERHEAD = 256


def weight(instance):
    """Return about how many bytes ``instance`` (claimed with its inputs) takes in a
    worker's pipe."""
    return (TASK_OVERHEAD + len(instance.inputs.data) + len(instance.identifier)
            + len(instance.tag or "") + len(instance.progress_message))


class Pace:
    """The recent length of a task and of the supervisor's work between two claims."""

    def __init__(self, cap):
        self.cap = cap
        self.task_seconds = None
        self.round_seconds = None

    def task_ended(self, seconds):
        """Note a task that ran ``seconds``; a longer one than expected counts at once."""
        seconds = max(seconds, 1e-6)
        if self.task_seconds is None or seconds > self.task_seconds:
            self.task_seconds = seconds
        else:
            self.task_seconds += (seconds - self.task_seconds) * EASING

    def setback(self):
        """Note a worker that died running a task: no queues until tasks are seen short
        again, so that tasks queued behind crashing ones do not come back over and over."""
        if self.round_seconds is not None:
            self.task_seconds = max(self.task_seconds or 0.0, ROUNDS_AHEAD * self.round_seconds)

    def round_took(self, seconds):
        """Note how long the supervisor was busy between two waits."""
        if self.round_seconds is None:
            self.round_seconds = seconds
        else:
            self.round_seconds += (seconds - self.round_seconds) * EASING

    def depth(self):
        """Return how many tasks each worker should have: its running one and those queued."""
        if not self.cap or self.task_seconds is None or self.round_seconds is None:
            return 1
        ahead = math.ceil(ROUNDS_AHEAD * self.round_seconds / self.task_seconds) - 1
        return 1 + max(0, min(self.cap, ahead))

    def is_overdue(self, running_seconds):
        """Return whether a task running ``running_seconds`` is already longer than the
        tasks queues are made for: nothing more is queued behind it."""
        return self.round_seconds is None or running_seconds > ROUNDS_AHEAD * self.round_seconds

    def free_slots(self, workers, now):
        """Return ``{worker: how many more tasks it may be given}``."""
        depth = self.depth()
        return {worker: worker.free_slots(
            1 if worker.queue and self.is_overdue(now - worker.queue[0].since) else depth)
            for worker in workers}


def distribute(instances, workers, slots):
    """Return ``(worker, instance)`` pairs giving tasks (in claim order) to ``workers``
    (``slots``: how many more each may take), and the tasks left over.

    The started tasks (RUNNING: as many as idle workers, claimed first) go to idle
    workers; the others to the idle workers left, then each to the worker with the
    shortest queue whose pipe has room for it (``PIPE_BUDGET``), so that the next task
    in claim order is the next to start. What is left over waits in the supervisor.
    """
    idle = [worker for worker in workers if worker.is_idle]
    room = {id(worker): slots[worker] for worker in workers}
    sizes = {id(worker): len(worker.queue) for worker in workers}
    loads = {id(worker): worker.inflight for worker in workers}
    pairs, left = [], []
    ordered = ([i for i in instances if i.status == Status.RUNNING]
               + [i for i in instances if i.status != Status.RUNNING])
    for instance in ordered:
        size = weight(instance)
        if idle:
            worker = idle.pop(0)  # it reads at once: its pipe takes anything
        else:
            open_workers = [w for w in workers if room[id(w)] > 0
                            and loads[id(w)] + size <= PIPE_BUDGET]
            if not open_workers or instance.status == Status.RUNNING:
                left.append(instance)
                continue
            worker = min(open_workers, key=lambda w: sizes[id(w)])
        room[id(worker)] -= 1
        sizes[id(worker)] += 1
        loads[id(worker)] += size
        pairs.append((worker, instance))
    return pairs, left
