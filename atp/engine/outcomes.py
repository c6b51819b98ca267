"""How an attempt ended: what a worker reports, and its supervisor writes.

A worker runs the handler and reports an ``Outcome`` through its pipe; the supervisor
writes the outcomes that arrive in the same moment together (``settle``), each still
guarded, fenced by its attempt and written with its history row. The response is
encoded in the worker, where the handler's value is, so a response that cannot be
stored fails the task there with the reason.

A task a worker took from its queue of prefetched tasks (see ``docs/daemon.md``)
starts before its start is written: its outcome then carries ``started_ago``, and the
write moves it from SCHEDULED through RUNNING (dated when it started) to its end. A
task still running when its supervisor writes gets an outcome of its own, RUNNING:
its start alone.
"""

from dataclasses import dataclass, fields

from atp.conf import conf
from atp.serialization import encode_response
from atp.states import Status

#: What an outcome asks for: end the task, or hand it back to the queue.
ENDINGS = (Status.FINISHED, Status.FAILED, Status.ACCEPTED, Status.CANCELLED)
#: What an outcome may ask for when its task's start is not written yet.
AFTER_START = (Status.RUNNING, Status.FINISHED, Status.FAILED)


def one_per_task(outcomes):
    """Return ``outcomes`` as a list, checked: a batch written together (``settle``) holds
    at most one outcome per task, the whole of what its attempt reported (a start not
    written goes with its end, ``since_start``). An engine writes a batch in one
    statement, where two rows of one task would leave one of them unwritten. Raise
    ``ValueError`` before writing anything."""
    outcomes = list(outcomes)
    seen, twice = set(), set()
    for outcome in outcomes:
        (twice if outcome.pk in seen else seen).add(outcome.pk)
    if twice:
        raise ValueError(f"a batch of outcomes holds one per task, not several of task(s) "
                         f"{', '.join(f'#{pk}' for pk in sorted(twice))}")
    return outcomes


@dataclass(frozen=True)
class Outcome:
    """The end of attempt ``attempt`` of task ``pk``: ``status`` FINISHED (with its encoded
    ``response``, ``(bytes, content type, charset)`` or None), FAILED (``message`` says
    why) or ACCEPTED (handed back, no restart spent).

    A CANCELLED outcome is a prefetched attempt that reached its worker after its task
    expired, never started (``lifecycle.expire_attempt``).

    An ACCEPTED outcome with a ``countdown`` is a snooze (``atp.Snooze``): the attempt
    ran, and the task waits ``countdown`` seconds to run again (``lifecycle.snooze``).

    ``started_ago`` (seconds) says the attempt started that long before the write and
    its start is not written yet; with it the status may be RUNNING (started, not ended).

    A FAILED outcome with ``may_retry`` goes to its type's retry policy
    (``lifecycle.fail_or_retry``), after ``countdown`` seconds when the handler asked
    for a retry (``atp.Retry``); it is written alone, not with the batch.
    """

    pk: int
    attempt: int
    status: str
    message: str = ""
    response: tuple = None
    started_ago: float = None
    may_retry: bool = False
    countdown: float = None

    @property
    def alone(self):
        """Whether this outcome is written by itself (a hand-back, a snooze, an expiry, or
        a failure that may be retried), not in a batch of ends."""
        return self.status in (Status.ACCEPTED, Status.CANCELLED) or self.may_retry

    @property
    def snoozes(self):
        """Whether the handler snoozed (``atp.Snooze``): back to wait ``countdown`` seconds."""
        return self.status == Status.ACCEPTED and self.countdown is not None

    def __post_init__(self):
        if self.started_ago is None:
            if self.status not in ENDINGS:
                raise ValueError(f"an attempt ends {', '.join(ENDINGS)}, not {self.status!r}")
        elif self.status not in AFTER_START and not self.snoozes:
            raise ValueError(f"an attempt whose start is not written moves to "
                             f"{', '.join(AFTER_START)}, not {self.status!r}")
        elif not self.started_ago >= 0:
            raise ValueError(f"started_ago is a number of seconds, not {self.started_ago!r}")

    def values(self):
        """Return this outcome's fields, in order, as plain values (``from_values`` reads
        them): what a worker sends its supervisor (``atp.daemon.handoff``)."""
        state = self.__dict__
        return tuple(state[name] for name in _FIELDS)

    @classmethod
    def from_values(cls, values):
        """Return the outcome ``values`` (``values()``'s) describe, as it was: not checked
        again."""
        return cls._made(zip(_FIELDS, values, strict=True))

    @classmethod
    def _made(cls, state):
        # As unpickling makes an object: its fields set at once, no __init__ and no checks
        # (a tenth of the cost; every prefetched task's end is made twice).
        made = object.__new__(cls)
        made.__dict__.update(state)
        return made

    def since_start(self, seconds):
        """Return this outcome with its start, ``seconds`` ago, to write with it."""
        if self.status == Status.ACCEPTED and not self.snoozes:
            return self  # handed back: it never ran, there is no start to write
        # As dataclasses.replace makes it; its checks hold: an end is a status after a
        # start, and the seconds are not negative.
        return self._made({**self.__dict__, "started_ago": max(0.0, seconds)})

    @classmethod
    def finished(cls, pk, attempt, result, *, content_type=None, max_bytes=None):
        """Return the FINISHED outcome with ``result`` as the response (None: none).

        Raise ``InvalidResponse`` (or ``ResponseTooLarge``) for one that cannot be stored.
        """
        response = None if result is None else encode_response(
            result, content_type, max_bytes=max_bytes or conf.MAX_RESPONSE_BYTES)
        return cls(pk, attempt, Status.FINISHED, response=response)

    @classmethod
    def failed(cls, pk, attempt, message, *, may_retry=False, countdown=None):
        return cls(pk, attempt, Status.FAILED, message=message, may_retry=may_retry,
                   countdown=countdown)

    @classmethod
    def started(cls, pk, attempt, seconds_ago):
        """Return the report of an attempt running for ``seconds_ago`` whose start is unwritten."""
        return cls(pk, attempt, Status.RUNNING, started_ago=max(0.0, seconds_ago))

    @classmethod
    def handed_back(cls, pk, attempt, message):
        return cls(pk, attempt, Status.ACCEPTED, message=message)

    @classmethod
    def expired(cls, pk, attempt):
        """Return the outcome of a prefetched attempt not started: its task expired."""
        return cls(pk, attempt, Status.CANCELLED)

    @classmethod
    def snoozed(cls, pk, attempt, seconds, message=""):
        """Return the outcome of an attempt whose handler snoozed for ``seconds``."""
        return cls(pk, attempt, Status.ACCEPTED, message=message, countdown=seconds)


#: The fields of an outcome, in order (``Outcome.values``).
_FIELDS = tuple(field.name for field in fields(Outcome))
