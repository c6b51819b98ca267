"""When atpd claims, how many tasks, and when it wakes up for the next delayed one.

The claim policy, apart from the loop that carries it out: the supervisor tells it what
happened (a wake-up, an end, tasks it enqueued itself, a claim and what it took) and
when, and asks it whether a claim is due, how large, and when to be up for one. It
reads neither the database nor a clock, and costs a few comparisons a round; it is
tested without a daemon (``tests/daemon/test_claiming.py``).

A claim is due when runnable tasks may wait that the last claim did not take:

- at start; after a wake-up (a NOTIFY, the doorbell), the database back after an
  outage, types taken on; after tasks the daemon enqueued itself (a batch's on-complete
  task, a schedule's run);
- after a full claim: more may wait;
- after an end, when a type the daemon runs has a concurrency limit or a rate: a task
  of that type may have waited for the place it freed. Otherwise the queue was empty
  at the last claim (a new task would have woken the daemon): the round only writes;
- every poll interval, in case a wake-up was missed (and for delayed tasks enqueued
  since: their enqueue wakes nobody);
- when the first task waiting for its time (an ``eta``, a retry's backoff, a rate's
  next token) comes due, if before the next poll. The daemon asks when that is a moment
  after a claim that took all that was runnable, not at once: the ends of the short
  tasks it just gave out are written first (the query on the way added half a
  millisecond to a short task's end on PostgreSQL).

The supervisor claims only when it may (it is not stopping, the database answers, its
lease holds) and its workers have room: ``size`` says how many.
"""

from dataclasses import dataclass

#: How long after a claim that took all that was runnable the daemon asks when the next
#: delayed task comes due (see above).
NEXT_DUE_LOOKUP_DELAY_SECONDS = 0.005


@dataclass(frozen=True)
class Claim:
    """A claim to make: ``limit`` tasks, the first ``start`` of them started (one for
    each idle worker), the rest prefetched; ``slots``: how many each worker may take."""

    limit: int
    start: int
    slots: dict


def room(slots, *, holding):
    """Return how many tasks the workers may be given: what ``slots`` (``{worker: how
    many more}``, from ``prefetch.Pace.free_slots``) adds up to, none while claimed tasks
    are ``holding`` in the supervisor (no pipe had room: they are given out first)."""
    return 0 if holding else sum(slots.values())


def size(slots, idle, *, holding):
    """Return the ``Claim`` the workers have room for (``idle`` of them are idle), or
    None when they have none (see ``room``)."""
    limit = room(slots, holding=holding)
    return Claim(limit, idle, slots) if limit else None


class ClaimPolicy:
    """What the daemon knows that decides its next claim (times are monotonic)."""

    def __init__(self, poll_interval):
        self.poll_interval = poll_interval
        # Whether runnable tasks may wait that the last claim did not take.
        self.expects_tasks = True
        self.next_poll = 0.0
        # When the first task waiting for its time becomes runnable, if before the next
        # poll, as found after the last claim that took all that was runnable; None: none
        # that soon.
        self.next_due = None
        # When to ask for that (None: not to ask), and when the claim it follows began (a
        # rate's bucket is judged as that claim found it, or a moment before).
        self.due_lookup_at = None
        self.claim_began_at = None

    # -- what happened -----------------------------------------------------------------

    def woken(self):
        """Note what may have made tasks runnable for this daemon: a wake-up (NOTIFY, the
        doorbell), the database back after an outage, types taken on."""
        self.expects_tasks = True

    def enqueued(self, count):
        """Note ``count`` tasks the daemon enqueued itself (on-complete tasks, schedules' runs)."""
        self.expects_tasks = self.expects_tasks or count > 0

    def task_ended(self, *, has_limits):
        """Note an end, which freed a place: worth a claim when the daemon runs a type
        with a limit or a rate (``has_limits``), whose next task may wait for that place."""
        self.expects_tasks = self.expects_tasks or has_limits

    def began(self, now):
        """Note a claim begun at ``now``: it is the poll, whatever comes of it."""
        self.next_poll = now + self.poll_interval
        self.claim_began_at = now

    def claimed(self, limit, taken, now, *, is_stopping):
        """Note a claim for ``limit`` tasks that took ``taken``, its tasks handed out at
        ``now``: a full one calls for another; after one that took all that was runnable,
        the next due time is asked for a moment later, unless the daemon stops."""
        self.expects_tasks = taken == limit
        self.next_due = None
        self.due_lookup_at = (None if self.expects_tasks or is_stopping
                              else now + NEXT_DUE_LOOKUP_DELAY_SECONDS)

    def take_due_lookup(self, now, *, is_stopping):
        """Return how long ago the last claim began (seconds) when the time has come to ask
        when the next delayed task comes due: once, when the time noted by ``claimed``
        has come, unless a claim is called for meanwhile (it asks again after it) or the
        daemon stops; else None."""
        if self.due_lookup_at is None or now < self.due_lookup_at:
            return None
        self.due_lookup_at = None
        return None if self.expects_tasks or is_stopping else now - self.claim_began_at

    def due_in(self, seconds, now):
        """Note the answer, at ``now``: the next delayed task comes due in ``seconds`` (None:
        not before the next poll)."""
        if seconds is not None:
            self.next_due = now + seconds

    # -- deciding ----------------------------------------------------------------------

    def is_due(self, now):
        """Return whether a claim is due at ``now`` (if the workers have room)."""
        return (self.expects_tasks or now >= self.next_poll
                or (self.next_due is not None and now >= self.next_due))

    def wake_at(self, *, has_idle, has_room, is_stopping):
        """Return when the loop must be up for a claim: the poll while a worker is idle,
        the next due time while the workers have room, the time to ask for it; None:
        none of these (the loop waits for its workers and the wake-ups)."""
        times = []
        if has_idle and not is_stopping:
            times.append(self.next_poll)
        if self.next_due is not None and has_room:
            times.append(self.next_due)
        if self.due_lookup_at is not None:
            times.append(self.due_lookup_at)
        return min(times) if times else None
