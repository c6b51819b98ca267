"""atp on PostgreSQL with its own engine, run from the project's .venv (the code checked
out, with the Django and psycopg that ``make bench`` uses), as ``make bench`` runs it."""

import os
import sys

from bench.peers import base
from bench.peers.body import record

TYPE = "peers.noop"


def noop(task, inputs):
    record(inputs)


class Runner(base.Runner):
    name = "atp"
    distribution = "django-atp"
    bulk_api = "atp.enqueue_many, 1,000 a call"
    configuration = ("atpd --workers N, its defaults (prefetch 256, poll 1 s, "
                     "LISTEN/NOTIFY); every transition in the history")

    def __init__(self):
        self.url = base.postgres_url(self.name)
        os.environ["ATP_BENCH_DATABASE_URL"] = self.url
        os.environ["DJANGO_SETTINGS_MODULE"] = "bench.peers.settings_atp"

    def version(self):
        import subprocess

        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=base.PROJECT_ROOT).stdout.strip()
        return f"{super().version()} {commit}".strip()

    def prepare(self):
        from bench.database import set_up_django

        base.recreate_database(self.url)
        set_up_django("bench.peers.settings_atp")
        import atp

        atp.register_task_type(TYPE, "bench.peers.run_atp.noop")

    def empty(self):
        from bench.daemon import reset

        reset()

    def enqueue_many(self, numbers):
        import atp

        atp.enqueue_many(TYPE, list(numbers))

    def enqueue_one(self, number):
        import atp

        atp.enqueue(TYPE, number)

    def worker_commands(self, workers):
        return [([sys.executable, "-m", "django", "atpd", "--workers", str(workers),
                  "--types", TYPE, "--log-level", "WARNING"], {})]

    def machine_reference(self):
        """Return ``bench.daemon``'s machine reference, taken here on PostgreSQL."""
        import tempfile

        from bench.daemon import machine_reference

        return machine_reference(tempfile.gettempdir())

    def close(self):
        from django.db import connections

        connections.close_all()
