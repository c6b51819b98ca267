"""What goes down the pipe from the supervisor to a worker: the tasks to run, as plain values.

A claim's tasks are model objects (``Instance``, with its ``Type`` and ``Inputs``).
Pickled as such, each carries its model state and related-object cache, and pickling
them was an eighth of the supervisor's time in a drain, unpickling them a large part of
a worker's. The message carries each task's column values instead, each type once, and
the worker makes the same objects again from them (``atp.engine.sql.from_values``).

    ("run", alias, {type key: type values}, [(task values, inputs values or None,
                                              attempt, handler, daemon), ...])

A worker answers each task with the values of its ``Outcome`` (``done``), and both ends
pickle their messages themselves (``send``): multiprocessing's own pickler copies its
table of reducers at each message, half of what a small one cost.
"""

import pickle

from atp.engine.outcomes import Outcome
from atp.engine.sql import attach, from_values, values_of
from atp.models import Inputs, Instance, Type


def send(channel, message):
    """Send ``message`` (plain values) down ``channel``, a ``multiprocessing`` connection
    (its ``recv`` reads it)."""
    channel.send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))


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
                      attempt, handler, daemon))
    return ("run", alias, types, items)


def unpack(message):
    """Return the ``(task, attempt, handler, daemon)`` tuples ``message`` (``pack``'s) hands
    over, each task made again with its type and inputs."""
    _, alias, types, items = message
    types = {pk: from_values(Type, alias, values) for pk, values in types.items()}
    tasks = []
    for values, inputs, attempt, handler, daemon in items:
        task = from_values(Instance, alias, values)
        attach(task, type=types[task.type_id],
               inputs=None if inputs is None else from_values(Inputs, alias, inputs))
        tasks.append((task, attempt, handler, daemon))
    return tasks
