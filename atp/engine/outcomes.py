"""How an attempt ended: what a worker reports, and its supervisor writes.

A worker runs the handler and reports an ``Outcome`` through its pipe; the supervisor
writes the outcomes that arrive in the same moment together (``settle``), each still
guarded, fenced by its attempt and written with its history row. The response is
encoded in the worker, where the handler's value is, so a response that cannot be
stored fails the task there with the reason.
"""

from dataclasses import dataclass

from atp.conf import conf
from atp.serialization import encode_response
from atp.states import Status

#: What an outcome asks for: end the task, or hand it back to the queue.
ENDINGS = (Status.FINISHED, Status.FAILED, Status.ACCEPTED)


@dataclass(frozen=True)
class Outcome:
    """The end of attempt ``attempt`` of task ``pk``: ``status`` FINISHED (with its encoded
    ``response``, ``(bytes, content type, charset)`` or None), FAILED (``message`` says
    why) or ACCEPTED (handed back, no restart spent)."""

    pk: int
    attempt: int
    status: str
    message: str = ""
    response: tuple = None

    def __post_init__(self):
        if self.status not in ENDINGS:
            raise ValueError(f"an attempt ends {', '.join(ENDINGS)}, not {self.status!r}")

    @classmethod
    def finished(cls, pk, attempt, result, *, content_type=None, max_bytes=None):
        """Return the FINISHED outcome with ``result`` as the response (None: none).

        Raise ``InvalidResponse`` (or ``ResponseTooLarge``) for one that cannot be stored.
        """
        response = None if result is None else encode_response(
            result, content_type, max_bytes=max_bytes or conf.MAX_RESPONSE_BYTES)
        return cls(pk, attempt, Status.FINISHED, response=response)

    @classmethod
    def failed(cls, pk, attempt, message):
        return cls(pk, attempt, Status.FAILED, message=message)

    @classmethod
    def handed_back(cls, pk, attempt, message):
        return cls(pk, attempt, Status.ACCEPTED, message=message)
