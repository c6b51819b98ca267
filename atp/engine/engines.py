"""The engine of the queue's database: hand-written SQL for the verbs every task goes
through, one module per database (``postgresql``, ``sqlite``), chosen once from the
connection's vendor. Each module also says, by flags, what differs on its database
(``ONE_STATEMENT``, ``NEEDS_IMMEDIATE_TRANSACTIONS``).

An engine implements the verbs of the hot path: ``claim`` (within the types'
concurrency limits), ``settle_and_claim``, ``settle``, ``start``, ``finish``,
``enqueue`` and ``enqueue_many``, with the guards, history and fencing of the ORM forms
in ``claim.py`` and ``lifecycle.py``. Those serve a database without an engine
(MySQL/MariaDB for now, or any database with ``ATP_ENGINE = "orm"``) and the
operators' verbs.
"""

from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from atp.conf import conf
from atp.engine import postgresql, sqlite
from atp.engine.base import database

#: The engine written for each database vendor.
BY_VENDOR = {"postgresql": postgresql, "sqlite": sqlite}

_chosen = {}


def engine_of(alias):
    """Return the engine module written for database ``alias``, whether the verbs use it
    or not (``ATP_ENGINE``, the database's version), or None: none is."""
    return BY_VENDOR.get(connections[alias].vendor)


def engine():
    """Return the engine module of the queue's database, or None (the ORM forms serve)."""
    alias = database()
    key = (alias, conf.ENGINE)
    if key not in _chosen:
        if conf.ENGINE not in ("auto", "orm"):
            raise ImproperlyConfigured(f'ATP_ENGINE is "auto" or "orm", not {conf.ENGINE!r}')
        written = engine_of(alias)
        if conf.ENGINE == "orm" or (written is sqlite and not sqlite.IS_SUPPORTED):
            written = None
        _chosen[key] = written
    return _chosen[key]
