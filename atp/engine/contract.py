"""The engine contract: what every engine of the queue implements, in full.

An engine writes the verbs every task goes through, for one database: claiming
(within the types' concurrency limits and rates), starting, settling and finishing
attempts, enqueueing one task and many, leasing to pull consumers, purging ended tasks,
and telling an idle daemon when the next waiting task is due. The queue's verbs (``atp.engine.claim``, ``lifecycle``,
``enqueue``) call ``engine()`` (``atp.engine.engines``) and the contract, never a
database's module: which engine serves is decided once, there.

Every verb is one whole transaction of the engine's (retried while the database is
busy), or a savepoint of the caller's transaction when there is one
(``atp.db.run_in_transaction``). Each keeps the same rules, whatever its statements:

- a claim takes runnable tasks in claim order (``atp.engine.sql.CLAIM_ORDER``), skips
  locked rows, never exceeds a type's ``max_concurrency`` (counted as the leases held)
  nor its bucket's tokens, claims nothing for a daemon declared stopped
  (``DaemonStopped``), and reports the queue rows it found stray;
- a write by a daemon is fenced by its attempt and refused once the task moved on;
- every change of state writes its history entry in the same transaction;
- an enqueue checks that the type is still as it was read (``checks_type_as_read``),
  or reads it itself.

An engine carries the ``Database`` it runs on (``atp.engine.databases``), where the rest
of atp asks what differs between databases. ``docs/engines.md`` says how to add one.
"""

import abc

from atp.db import run_in_transaction
from atp.engine.base import database


class Engine(abc.ABC):
    """The verbs of the hot path, written for a database."""

    #: Its name, as ``docs/engines.md`` and the daemon's start-up line give it.
    name = None
    #: Whether each verb is one statement, atomic by itself (run without BEGIN/COMMIT).
    one_statement = False
    #: Whether its enqueue checks, in its transaction, that the task type is still as it
    #: was read: then the enqueue verb may pass a type it read earlier (a cache).
    checks_type_as_read = True

    def __init__(self, database_):
        #: The ``Database`` it runs on.
        self.database = database_

    def __repr__(self):
        return f"<{type(self).__name__} engine on {type(self.database).__name__}>"

    def transaction(self, function, *, one_statement=None):
        """Run ``function()`` as one of this engine's verbs: its own retried transaction,
        or a savepoint of the caller's. ``one_statement`` (default: the engine's) runs it
        without BEGIN and COMMIT: say False for a verb of several statements."""
        single = self.one_statement if one_statement is None else one_statement
        return run_in_transaction(function, database(), single_statement=single)

    @abc.abstractmethod
    def claim(self, daemon, limit, type_ids, *, start=0, inputs=False, limited=False):
        """Lease up to ``limit`` runnable tasks of the types ``type_ids`` to ``daemon``,
        SCHEDULED with a new attempt, within their limits; start the first ``start``
        (RUNNING); return ``(instances in claim order, with their type and, with
        ``inputs``, their inputs; keys of stray queue rows found)``. ``limited`` says a
        type among them was last seen limited (an engine may claim within limits at once).
        Raise ``DaemonStopped``."""

    @abc.abstractmethod
    def settle_and_claim(self, daemon, outcomes, limit, type_ids, *, start, limited=False):
        """``settle`` then ``claim`` (with inputs), one commit for both; return ``(keys
        of the tasks settled, what claim returns)``. ``DaemonStopped`` may leave the
        settle written."""

    @abc.abstractmethod
    def settle(self, daemon, outcomes):
        """Write the ends (``atp.engine.outcomes.Outcome``) and unwritten starts of attempts
        ``daemon`` ran, each fenced by its attempt; return the keys of the tasks written."""

    @abc.abstractmethod
    def start(self, pk, attempt, daemon):
        """Move task ``pk`` from SCHEDULED to RUNNING on ``attempt``; return it with its
        type and inputs. Raise ``InvalidTransition`` or ``AttemptSuperseded``."""

    @abc.abstractmethod
    def finish(self, pk, attempt, message, daemon, response, content_type):
        """End attempt ``attempt`` of task ``pk`` FINISHED, storing ``response`` (not None);
        return the attempt. Raise as ``start`` does, or ``InvalidResponse``."""

    @abc.abstractmethod
    def log(self, pk, message, attempt, daemon):
        """Add ``message`` (text a database stores) to task ``pk``'s history, changing no
        state, as written by ``daemon`` (its label); with ``attempt`` (a handler's line)
        only while that attempt runs (SCHEDULED, RUNNING or PAUSED). Raise
        ``TaskNotFound``, ``InvalidTransition`` or ``AttemptSuperseded``."""

    @abc.abstractmethod
    def set_progress(self, pk, done, total, message, attempt):
        """Record task ``pk``'s progress (checked numbers, a message that fits): with
        ``attempt`` while that attempt runs, else while the task is RUNNING or PAUSED.
        Raise as ``log`` does."""

    @abc.abstractmethod
    def enqueue(self, task_type, instance, data, not_before, size, notify):
        """Write the task ``instance`` (unsaved: its identifier, priority, ``named``, tag,
        batch) with encoded inputs ``data`` (``size`` bytes), due at ``not_before`` (a
        datetime, or a delay from now); wake the daemons with ``notify``. Return ``(key,
        creation time)``, or None when ``task_type`` changed since it was read. Raise
        ``IntegrityError`` for a live task of the same name."""

    @abc.abstractmethod
    def enqueue_many(self, task_type, identifiers, data, priority, not_before, notify, *,
                     tag=None, named=False):
        """Write one task per identifier and encoded inputs; return ``(key, identifier,
        creation time)`` per task, or None as ``enqueue`` does."""

    @abc.abstractmethod
    def lease(self, type_id, limit, lease, tag, group_by_tag, consumer):
        """Lease up to ``limit`` runnable tasks of pull type ``type_id`` to the consumer
        named ``consumer`` for ``lease`` (a timedelta), those tagged ``tag`` or, with
        ``group_by_tag``, those sharing the first one's tag; return them RUNNING in claim
        order, with their type, inputs and holder (``atp.engine.pull.lease_tasks``)."""

    @abc.abstractmethod
    def purge(self, type_id, age, limit):
        """Delete up to ``limit`` ended tasks of type ``type_id`` that ended more than
        ``age`` (a timedelta) ago, oldest first, each with all it holds (a tombstone
        kept for a name its type's ``dedup_window`` still holds), skipping those another
        transaction holds and those still on the queue; return their keys
        (``atp.engine.maintenance.purge_in_transaction``)."""

    @abc.abstractmethod
    def next_due(self, type_ids, within):
        """Return in how many seconds the first waiting task of ``type_ids`` (unleased,
        unpaused) becomes runnable, if within ``within`` seconds; else None."""

    def lease_keys(self, daemon, pks, type_ids, *, start=0, inputs=False):
        """In a claim's transaction that chose the waiting rows ``pks`` (of the types
        ``type_ids``) and locked them, its daemon's row locked too (the gated claim,
        ``atp.engine.semaphores``): lease them to ``daemon`` as a claim does, starting the
        first ``start``; return ``(instances in the order of pks, with their inputs when
        ``inputs``; keys of the stray rows)``. The portable form here
        (``atp.engine.orm.lease_chosen``); an engine with statements of its own for it
        overrides it."""
        from atp.engine.orm import lease_chosen

        return lease_chosen(daemon, pks, start, inputs)


#: The verbs every engine implements.
VERBS = tuple(sorted(Engine.__abstractmethods__))
