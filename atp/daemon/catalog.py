"""Which task types this daemon runs: those whose handler it has loaded.

A daemon loads its handlers when it starts, before it forks its workers, so every
worker runs the code the daemon started with. It claims only the types whose handler
that code has: a type added to a ``tasks.py`` after the daemon started (or registered
by web servers deployed before the daemons) waits, rather than failing for good with
"not a function defined in ...", until a daemon that has the code runs it. Types
appearing later are taken on if their handler's module is already loaded; the daemon
never imports code in its loop (an import that hangs would freeze it). What each
daemon runs is recorded (``Daemon.serves``), so that the dashboard and the admin can
say "no live daemon runs this type". Pull types are left out without a word: their
tasks are leased by consumers outside atpd (``atp.lease_tasks``), never run by a daemon.
"""

import logging

from atp import registry
from atp.conf import conf
from atp.engine.types import catalog_rows
from atp.exceptions import InvalidHandler
from atp.serialization import InputFormat

logger = logging.getLogger(__name__)


class Catalog:
    """The types this daemon runs, by identifier, with the handler path it loaded for each."""

    def __init__(self, only=None):
        self.only = set(only) if only else None
        self.runnable = {}  # identifier -> (type id, handler path)
        self.refused = {}  # identifier -> why, as last logged
        self.has_limits = False  # whether a type it runs has a concurrency limit or a rate
        self.has_rates = False  # whether a type it runs has a rate
        self.gated = []  # the keys of the types it runs whose tasks may hold semaphores

    def identifiers(self):
        """Return the identifiers of the types this daemon runs, sorted."""
        return sorted(self.runnable)

    def type_ids(self):
        return sorted(type_id for type_id, _ in self.runnable.values())

    def can_run(self, identifier, handler_path):
        """Return whether this daemon runs type ``identifier`` with handler ``handler_path``."""
        return self.runnable.get(identifier, (None, None))[1] == handler_path

    def load(self, *, may_import):
        """Read the types and resolve their handlers; return whether what runs changed.

        With ``may_import`` (at start, before forking) handlers' modules are imported;
        later, only modules already loaded are looked into.
        """
        runnable, refused, has_limits, has_rates, gated = {}, {}, False, False, []
        for type_id, identifier, handler, input_format, limit, rate, pull, is_gated in (
                catalog_rows()):
            if self.only is not None and identifier not in self.only:
                continue
            if pull:  # leased by consumers (atp.lease_tasks): no daemon's business
                if self.only is not None:
                    refused[identifier] = "it is a pull type: its tasks are leased with lease_tasks()"
                continue
            reason = _why_not(handler, input_format, may_import)
            if reason is None:
                runnable[identifier] = (type_id, handler)
                has_limits = has_limits or limit is not None or rate is not None
                has_rates = has_rates or rate is not None
                if is_gated:
                    gated.append(type_id)
            else:
                refused[identifier] = reason
        for identifier in (self.only or set()) - runnable.keys() - refused.keys():
            refused[identifier] = "no task type of that name is registered"
        for identifier, reason in refused.items():
            if self.refused.get(identifier) != reason:
                logger.error("atpd does not run type %s: %s; its tasks wait for a daemon "
                             "that does", identifier, reason)
        for identifier in runnable.keys() & self.refused.keys():
            logger.info("atpd runs type %s now", identifier)
        changed = runnable != self.runnable
        self.runnable, self.refused = runnable, refused
        self.has_limits, self.has_rates, self.gated = has_limits, has_rates, sorted(gated)
        return changed


def _why_not(handler, input_format, may_import):
    """Return why this daemon cannot run a type's tasks, or None when it can."""
    if input_format == InputFormat.PICKLE and not conf.PICKLE_ENABLED:
        return "its inputs are pickled and ATP_PICKLE_ENABLED is off"
    try:
        registry.resolve_handler(handler, may_import=may_import)
    except InvalidHandler as exc:
        if not may_import:
            return f"{exc}: restart atpd (or run it with --reload) to load new code"
        return str(exc)
    return None
