"""Which engine serves the queue: chosen once per database and ``ATP_ENGINE``.

Each database atp has an engine for has its module (``postgresql``, ``sqlite``, ``mysql``) with its
engine class; any other database, and any database with ``ATP_ENGINE = "orm"``, is
served by the portable engine (``orm``). Every engine implements the contract
(``atp.engine.contract``), so ``engine()`` always returns one and no caller asks which.
Adding an engine is its module and one line in ``NATIVE``.
"""

from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from atp.conf import conf
from atp.engine.base import database
from atp.engine.databases import database_of

#: The values ``ATP_ENGINE`` takes.
CHOICES = ("auto", "orm")

_chosen = {}


def _native(connection):
    """Return ``{vendor: the engine class written for it}`` on ``connection``'s server
    (imported when first asked: the engines import the verbs' modules, which ask for
    ``engine()``). Where the server lacks what the engine needs, the portable one serves."""
    from atp.engine import mysql, postgresql, sqlite

    return {
        "postgresql": postgresql.PostgreSQLEngine,
        # RETURNING is needed: older SQLite libraries get the portable engine.
        "sqlite": sqlite.SQLiteEngine if sqlite.IS_SUPPORTED else None,
        # SKIP LOCKED: MariaDB 10.6 and MySQL 8.
        "mysql": (mysql.MySQLEngine
                  if connection.features.has_select_for_update_skip_locked else None),
    }


def engine_for(alias, choice="auto"):
    """Return the engine that serves database ``alias`` under ``ATP_ENGINE = choice``."""
    from atp.engine.orm import OrmEngine

    if choice not in CHOICES:
        raise ImproperlyConfigured(f'ATP_ENGINE is "auto" or "orm", not {choice!r}')
    connection = connections[alias]
    native = _native(connection).get(connection.vendor) if choice == "auto" else None
    return (native or OrmEngine)(database_of(alias))


def engine():
    """Return the engine of the queue's database (``atp.engine.contract.Engine``)."""
    alias = database()
    key = (alias, conf.ENGINE)
    chosen = _chosen.get(key)
    if chosen is None:
        chosen = _chosen[key] = engine_for(alias, conf.ENGINE)
    return chosen
