"""The interface every system's runner implements, and where the servers are."""

import importlib.metadata
import os
import signal
from pathlib import Path
from urllib.parse import urlsplit

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
#: The PostgreSQL server (no database: each system gets ``atp_peers_<system>`` there).
POSTGRES_ENV = "ATP_PEERS_POSTGRES_URL"
POSTGRES_DEFAULT = "postgres://postgres@127.0.0.1:5432"
#: The Redis server (each system on it gets a database number of its own).
REDIS_ENV = "ATP_PEERS_REDIS_URL"
REDIS_DEFAULT = "redis://127.0.0.1:6379"
#: RabbitMQ, for Celery when asked for (``--celery-broker amqp``).
AMQP_ENV = "ATP_PEERS_AMQP_URL"
AMQP_DEFAULT = "amqp://guest:guest@127.0.0.1:5672//"
#: Where the driver tells a runner which broker Celery is to use.
CELERY_BROKER_ENV = "ATP_PEERS_CELERY_BROKER"

#: Every system, in the order they run (atp first: the others' ratios are to its
#: figures): its runner module, and the venv it runs in ("project": atp's .venv, the
#: code checked out; "peers": .venv-peers, from bench/peers/requirements.txt).
SYSTEMS = {
    "atp": ("bench.peers.run_atp", "project"),
    "pgqueuer": ("bench.peers.run_pgqueuer", "peers"),
    "procrastinate": ("bench.peers.run_procrastinate", "peers"),
    "django-q2": ("bench.peers.run_djangoq", "peers"),
    "django-tasks-db": ("bench.peers.run_django_tasks", "peers"),
    "huey": ("bench.peers.run_huey", "peers"),
    "celery": ("bench.peers.run_celery", "peers"),
}
#: The systems whose tasks are kept in Redis (or RabbitMQ), not in PostgreSQL.
BROKERED = ("huey", "celery")


def postgres_url(system):
    """Return the URL of ``system``'s own database, ``atp_peers_<system>``."""
    server = os.environ.get(POSTGRES_ENV, POSTGRES_DEFAULT).rstrip("/")
    return f"{server}/atp_peers_{system.replace('-', '_')}"


def redis_url(database_number):
    """Return the URL of database ``database_number`` on the Redis server."""
    return f"{os.environ.get(REDIS_ENV, REDIS_DEFAULT).rstrip('/')}/{database_number}"


def django_databases(url):
    """Return Django's ``DATABASES`` for the PostgreSQL database ``url``."""
    parts = urlsplit(url)
    return {"default": {
        "ENGINE": "django.db.backends.postgresql", "NAME": parts.path.lstrip("/"),
        "USER": parts.username or "postgres", "PASSWORD": parts.password or "",
        "HOST": parts.hostname or "127.0.0.1", "PORT": str(parts.port or 5432),
    }}


def recreate_database(url):
    """Drop the PostgreSQL database ``url`` names and create it empty."""
    from bench.database import recreate_postgres

    recreate_postgres(url)


class Runner:
    """One system as the workloads drive it: how it enqueues, how its workers start, how
    its store is emptied. Each ``run_<system>`` module has one subclass, ``Runner``."""

    #: The system's name on the command line (``--peers``) and in the table.
    name = ""
    #: The distribution whose version the table shows.
    distribution = ""
    #: Where it keeps its tasks, as the table says it.
    store = "PostgreSQL"
    #: What ``enqueue_many`` calls: the system's own bulk API, or a loop where it has none.
    bulk_api = ""
    #: Its settings, in a line: what it is left at (its defaults) and what is set.
    configuration = ""
    #: The signal that stops its workers.
    stop_signal = signal.SIGTERM

    def version(self):
        """Return the measured version of the system."""
        return importlib.metadata.version(self.distribution)

    def prepare(self):
        """Create the system's store anew (database dropped, Redis flushed), its schema."""
        raise NotImplementedError

    def empty(self):
        """Remove every task, waiting or ended, so that a measurement starts empty."""
        raise NotImplementedError

    def enqueue_many(self, numbers):
        """Enqueue one no-op task per number, through the system's best bulk API."""
        raise NotImplementedError

    def enqueue_one(self, number):
        """Enqueue the no-op task ``number`` as an application would, on its own."""
        raise NotImplementedError

    def worker_commands(self, workers):
        """Return ``[(argv, environment)]``: the processes that run tasks on ``workers``
        workers (one command with a concurrency, or one command per worker)."""
        raise NotImplementedError

    def close(self):
        """Close what the runner holds open (connections, loops)."""
