"""What goes down the pipe from the supervisor to a worker: the tasks to run, as plain values.

A claim's tasks are model objects (``Instance``, with its ``Type`` and ``Inputs``).
Pickled as such, each carries its model state and related-object cache, and pickling
them was an eighth of the supervisor's time in a drain, unpickling them a large part of
a worker's. The message carries each task's column values instead, each type once, and
the worker makes the same objects again from them (``atp.engine.sql.from_values``).

    ("run", alias, {type key: type values}, [(task values, inputs values or None,
                                              attempt, handler, daemon, claimed), ...])

``claimed`` is when the supervisor had the task's claim back, on the lease clock (None:
not known): a task waits in its worker's queue behind the one running, and its
expiry counts from its claim (``atp.daemon.execution.has_expired``).

A worker answers each task with the values of its ``Outcome`` (``done``), and both ends
pickle their messages themselves (``send``): multiprocessing's own pickler copies its
table of reducers at each message, half of what a small one cost. The supervisor reads
a worker's answers with an ``Inbox``: all that has arrived in one read.
"""

import os
import pickle
import socket
import struct

from atp.engine.outcomes import Outcome
from atp.engine.sql import attach, from_values, values_of
from atp.models import Inputs, Instance, Type


def send(channel, message):
    """Send ``message`` (plain values) down ``channel``, a ``multiprocessing`` connection
    (its ``recv`` reads it)."""
    channel.send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))


#: How much an ``Inbox`` reads at once.
READ_SIZE = 1 << 16
_LENGTH = struct.Struct("!i")  # a message's length, before it (``Connection.send_bytes``)
_LONG_LENGTH = struct.Struct("!Q")  # after a length of -1: a message of 2 GiB or more


class Inbox:
    """The messages that came down ``channel`` (a ``multiprocessing`` connection over a
    socket, as ``Pipe(duplex=True)`` makes on Unix), read without waiting.

    ``Connection.poll`` makes a selector for each call, and ``recv`` reads a message's
    length and its body apart: three system calls and a selector a report, about a
    seventh of the supervisor's CPU in a drain. ``take`` reads all that has arrived at once and
    cuts it into messages itself, framed as ``Connection.send_bytes`` frames them. Only
    the inbox may read from ``channel`` then. It reads from a copy of the descriptor,
    which ``close`` closes.
    """

    def __init__(self, channel):
        self._socket = socket.socket(fileno=os.dup(channel.fileno()))
        self._buffer = bytearray()
        self._ended = False

    def take(self):
        """Return the messages complete so far, in order (unpickled); raise ``EOFError``
        once the other end is closed and every message sent before was taken."""
        while not self._ended:
            try:
                data = self._socket.recv(READ_SIZE, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            except ConnectionResetError:
                data = b""
            if not data:
                self._ended = True
                break
            self._buffer += data
            if len(data) < READ_SIZE:
                break
        messages = list(self._messages())
        if not messages and self._ended:
            raise EOFError("the worker's end of the channel is closed")
        return messages

    def _messages(self):
        buffer, start = self._buffer, 0
        while True:
            header = _LENGTH.size
            if len(buffer) - start < header:
                break
            [size] = _LENGTH.unpack_from(buffer, start)
            if size == -1:
                header += _LONG_LENGTH.size
                if len(buffer) - start < header:
                    break
                [size] = _LONG_LENGTH.unpack_from(buffer, start + _LENGTH.size)
            end = start + header + size
            if len(buffer) < end:
                break
            yield pickle.loads(buffer[start + header:end])
            start = end
        del buffer[:start]

    def fileno(self):
        return self._socket.fileno()

    def close(self):
        self._socket.close()


def done(pk, attempt, outcome, ended_at):
    """Return the message that reports the end of attempt ``attempt`` of task ``pk``."""
    return ("done", pk, attempt, outcome.values(), ended_at)


def outcome_of(values):
    """Return the ``Outcome`` a ``done`` message carries (its values)."""
    return Outcome.from_values(values)


def pack(tasks):
    """Return the message that hands ``tasks`` (``(task, attempt, handler, daemon)``
    tuples, each task loaded with its type and, when loaded, its inputs) to a worker."""
    types, items, alias = {}, [], None
    for task, attempt, handler, daemon in tasks:
        alias = task._state.db
        if task.type_id not in types:
            types[task.type_id] = values_of(task.type)
        inputs = Instance.inputs.related.get_cached_value(task, None)
        items.append((values_of(task), None if inputs is None else values_of(inputs),
                      attempt, handler, daemon, getattr(task, "claimed_clock", None)))
    return ("run", alias, types, items)


def unpack(message):
    """Return the ``(task, attempt, handler, daemon)`` tuples ``message`` (``pack``'s) hands
    over, each task made again with its type and inputs."""
    _, alias, types, items = message
    types = {pk: from_values(Type, alias, values) for pk, values in types.items()}
    tasks = []
    for values, inputs, attempt, handler, daemon, claimed in items:
        task = from_values(Instance, alias, values)
        attach(task, type=types[task.type_id],
               inputs=None if inputs is None else from_values(Inputs, alias, inputs))
        if claimed is not None:
            task.claimed_clock = claimed
        tasks.append((task, attempt, handler, daemon))
    return tasks
