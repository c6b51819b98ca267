"""What the per-database engines (``postgresql``, ``sqlite``) share to write SQL by hand:
table and column names, and models built from the rows a statement returns."""

from django.db import connections

from atp.engine.base import database
from atp.models import Inputs, Instance, LogRecord, Response, Task, Type

TASK, INSTANCE = Task._meta.db_table, Instance._meta.db_table
TYPE, LOG = Type._meta.db_table, LogRecord._meta.db_table
INPUTS, RESPONSE = Inputs._meta.db_table, Response._meta.db_table

#: The partial index of waiting queue rows, in claim order (``Task.Meta.indexes``).
CLAIM_INDEX = "atp_task_claim_idx"

#: A history entry a daemon writes: no person made it (actor is empty).
LOG_COLUMNS = f"INSERT INTO {LOG} (instance_id, time, status, attempt, message, daemon, actor)"


def columns(model, alias):
    """Return ``alias.column, ...`` for every concrete field of ``model``, in field order."""
    return ", ".join(f"{alias}.{field.column}" for field in model._meta.concrete_fields)


def one_of(column, states):
    """Return ``column IN ('A', ...)`` for task states (constants, never user input)."""
    return f"{column} IN ({', '.join(repr(str(state)) for state in sorted(states))})"


def stored_fields(model):
    """Return the concrete fields of ``model`` an INSERT writes: all but an automatic key."""
    return [field for field in model._meta.concrete_fields if not (
        field.primary_key and field.get_internal_type() in ("AutoField", "BigAutoField"))]


def width(model):
    return len(model._meta.concrete_fields)


_converters = {}


def _converters_of(model, connection):
    """Return ``(index, column, converters)`` of the fields of ``model`` that need converting."""
    key = (model, connection.alias)
    if key not in _converters:
        found = []
        for index, field in enumerate(model._meta.concrete_fields):
            column = field.get_col(model._meta.db_table)
            converters = (connection.ops.get_db_converters(column)
                          + column.get_db_converters(connection))
            if converters:
                found.append((index, column, converters))
        _converters[key] = found
    return _converters[key]


def build(model, values):
    """Return a ``model`` instance from a row of its columns, in field order, converted
    as the ORM converts what it reads (SQLite's text dates, integer booleans...)."""
    connection = connections[database()]
    values = list(values)
    for index, column, converters in _converters_of(model, connection):
        for converter in converters:
            values[index] = converter(values[index], column, connection)
    names = [field.attname for field in model._meta.concrete_fields]
    return model.from_db(connection.alias, names, values)


def check_start(start):
    """Return ``start``, how many claimed tasks a claim starts, checked (True is no count)."""
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ValueError(f"a claim starts a non-negative number of tasks, not {start!r}")
    return start
