"""What the engines that write their own SQL (``postgresql``, ``sqlite``, ``mysql``) share:
the claim order, rows as the database stores them, and models built from the rows a
statement returns."""

from django.db import connections
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from atp.engine.base import database
from atp.engine.contract import Engine
from atp.models import Inputs, Instance

#: The partial index of waiting queue rows, in claim order (``Task.Meta.indexes``).
CLAIM_INDEX = "atp_task_claim_idx"
#: Claim order, the one every engine claims in: highest priority first, then the task
#: runnable longest, then the oldest. ``atp_task_claim_idx`` has these columns in this
#: order (``Task.Meta.indexes``).
CLAIM_ORDER = ("-priority", "not_before", "instance_id")
#: The index of the waiting gated rows (those holding semaphores), in their claim order:
#: highest priority first, then their turn (``Task.turn``: keys take turns), then the oldest.
GATED_INDEX = "atp_task_gated_idx"
GATED_ORDER = ("-priority", "turn", "instance_id")
#: The same as an SQL clause.
CLAIM_ORDER_SQL = "ORDER BY " + ", ".join(
    f"{name[1:]} DESC" if name.startswith("-") else name for name in CLAIM_ORDER)


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
    as the ORM converts what it reads (SQLite's text dates, integer booleans...).

    The object is the one ``Model.from_db`` makes. While nothing listens to
    ``pre_init`` or ``post_init`` it is made as unpickling makes one (its attributes set
    at once, not one by one through ``Model.__init__``): a claim builds a task per row,
    and ``__init__`` was a tenth of the supervisor's time in a drain."""
    return builder(model)(values)


def builder(model):
    """Return ``build`` for ``model``, for the rows of one statement: the connection and
    the converters are looked up once (the lookup was a twentieth of the supervisor's
    time in a drain, done per row)."""
    connection = connections[database()]
    alias, converters = connection.alias, _converters_of(model, connection)

    def make(values):
        values = list(values)
        for index, column, column_converters in converters:
            for converter in column_converters:
                values[index] = converter(values[index], column, connection)
        return from_values(model, alias, values)

    return make


def attach(instance, *, type=None, inputs=None):  # noqa: A002 -- the field's name
    """Give the task ``instance`` its ``type`` and ``inputs`` as ``instance.type = ...`` and
    ``instance.inputs = ...`` do (the keys copied, both sides cached), without the checks
    they make of objects from elsewhere (their class, the router's say): these come from
    the same statements. The checks were 7 % of the supervisor's time in a drain."""
    if type is not None:
        instance.type_id = type.pk
        Instance.type.field.set_cached_value(instance, type)
    if inputs is not None:
        inputs.instance_id = instance.pk  # None where the task has no inputs row
        Instance.inputs.related.set_cached_value(instance, inputs)
        Inputs.instance.field.set_cached_value(inputs, instance)


def by_key(make, rows):
    """Return ``{key: object}`` of ``rows``, each made with ``make`` (a ``builder``) from a
    row whose first column is its key."""
    return {row[0]: make(row) for row in rows}


def from_values(model, alias, values):
    """Return the ``model`` instance ``Model.from_db`` makes from ``values`` (its fields'
    Python values, in field order) read from database ``alias``."""
    names = _attnames_of(model)
    if pre_init.receivers or post_init.receivers:
        return model.from_db(alias, names, values)
    new = model.__new__(model)
    state = new._state = ModelState()
    state.adding, state.db = False, alias
    new.__dict__.update(zip(names, values, strict=True))
    return new


def values_of(obj):
    """Return the values of ``obj``'s fields, in field order (``from_values`` reads them)."""
    fields = obj.__dict__
    return tuple(fields[name] if name in fields else getattr(obj, name)  # deferred: read it
                 for name in _attnames_of(type(obj)))


_attnames = {}


def _attnames_of(model):
    if model not in _attnames:
        _attnames[model] = [field.attname for field in model._meta.concrete_fields]
    return _attnames[model]


def check_start(start):
    """Return ``start``, how many claimed tasks a claim starts, checked (True is no count)."""
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ValueError(f"a claim starts a non-negative number of tasks, not {start!r}")
    return start


#: Per model and database: its stored fields, and the default of each as stored (None: called anew).
_DEFAULTS = {}


def row_values(model, connection, given):
    """Return the values of a row of ``model`` by column, as the database stores them:
    ``given`` (attname -> value), else each field's default, as ``Model`` would fill it
    (the defaults are prepared once; building model objects for a template was a tenth
    of a single enqueue)."""
    key = (model, connection.alias)
    if key not in _DEFAULTS:
        _DEFAULTS[key] = [
            (field, None if callable(field.default) else field.get_db_prep_save(
                field.get_default(), connection))
            for field in stored_fields(model)]
    row = {}
    for field, default in _DEFAULTS[key]:
        if field.attname in given:
            row[field.column] = field.get_db_prep_save(given[field.attname], connection)
        elif default is None and callable(field.default):
            row[field.column] = field.get_db_prep_save(field.get_default(), connection)
        else:
            row[field.column] = default
    return row


def enqueue_one(enqueue_many, task_type, instance, data, not_before, notify):
    """Write one task with ``enqueue_many`` (an engine's, of one); return its key and
    creation time, or None when ``task_type`` changed since it was read."""
    rows = enqueue_many(task_type, [instance.identifier], [data], instance.priority, not_before,
                        notify, tag=instance.tag, named=instance.named)
    return None if rows is None else rows[0][::2]


class StatementsEngine(Engine):
    """An engine whose verbs are the functions of a module of hand-written statements
    (``postgresql``, ``sqlite``, ``mysql``), each run as one of the engine's transactions.
    A subclass names the module (``verbs``: not to be confused with ``atp.engine.statements``,
    which reads the files of SQL those modules run); PostgreSQL's writes its claims, which
    take a second statement within limits."""

    #: The module whose functions are the verbs (``claim``, ``settle``, ...).
    verbs = None

    def claim(self, daemon, limit, type_ids, *, start=0, inputs=False, limited=False):
        return self.transaction(
            lambda: self.verbs.claim(daemon, limit, type_ids, start, inputs))

    def settle_and_claim(self, daemon, outcomes, limit, type_ids, *, start, limited=False):
        return self.transaction(
            lambda: self.verbs.settle_and_claim(daemon, outcomes, limit, type_ids, start))

    def settle(self, daemon, outcomes):
        return self.transaction(lambda: self.verbs.settle(daemon, outcomes))

    def lease_keys(self, daemon, pks, type_ids, *, start=0, inputs=False):
        return self.verbs.lease_keys(daemon, pks, type_ids, start, inputs)

    def start(self, pk, attempt, daemon):
        return self.transaction(lambda: self.verbs.start(pk, attempt, daemon))

    def finish(self, pk, attempt, message, daemon, response, content_type):
        return self.transaction(lambda: self.verbs.finish(
            pk, attempt, message, daemon, response, content_type))

    def enqueue(self, task_type, instance, data, not_before, size, notify):
        return self.transaction(lambda: self.verbs.enqueue(
            task_type, instance, data, not_before, size, notify))

    def enqueue_many(self, task_type, identifiers, data, priority, not_before, notify, *,
                     tag=None, named=False):
        return self.transaction(lambda: self.verbs.enqueue_many(
            task_type, identifiers, data, priority, not_before, notify, tag=tag, named=named))

    def next_due(self, type_ids, within):
        return self.verbs.next_due(type_ids, within)

    def lease(self, type_id, limit, lease, tag, group_by_tag, consumer):
        # Pull consumers lease in the portable form on every database: a lease is no
        # daemon's hot path, and its statements are the ORM's (``atp.engine.pull``).
        from atp.engine.pull import lease_in_transaction

        return self.transaction(lambda: lease_in_transaction(
            type_id, limit, lease, tag, group_by_tag, consumer), one_statement=False)

    def log(self, pk, message, attempt, daemon):
        # A handler's history lines and progress are portable where the engine has no
        # statement of its own for them (``atp.engine.records``).
        from atp.engine.records import log_in_transaction

        return self.transaction(lambda: log_in_transaction(pk, message, attempt, daemon),
                                one_statement=False)

    def set_progress(self, pk, done, total, message, attempt):
        from atp.engine.records import set_progress_in_transaction

        return self.transaction(lambda: set_progress_in_transaction(
            pk, done, total, message, attempt), one_statement=False)

    def purge(self, type_id, age, limit):
        # Purges are portable too: a daemon's upkeep, a batch at a time, off the hot path.
        from atp.engine.maintenance import purge_in_transaction

        return self.transaction(lambda: purge_in_transaction(type_id, age, limit),
                                one_statement=False)
