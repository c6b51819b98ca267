"""django-q2 with its ORM broker on PostgreSQL (the database-backed set-up; its default
broker is Redis), a cluster of N worker processes, every other setting at its default
(the broker polled every 0.2 s, one task a fetch, the last 250 results kept)."""

import os
import sys

from bench.peers import base
from bench.peers.body import record

SETTINGS = "bench.peers.settings_djangoq"


def noop(number):
    record(number)


class Runner(base.Runner):
    name = "django-q2"
    distribution = "django-q2"
    bulk_api = "a loop of async_task in one transaction (no bulk API)"
    configuration = ("`qcluster` with `workers` N, the ORM broker, its defaults (poll 0.2 s, "
                     "bulk 1, save_limit 250)")

    def __init__(self):
        self.url = base.postgres_url(self.name)
        os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS

    def prepare(self):
        from bench.database import set_up_django

        base.recreate_database(self.url)
        set_up_django(SETTINGS)

    def empty(self):
        from django_q.models import OrmQ, Task

        OrmQ.objects.all().delete()
        Task.objects.all().delete()

    def enqueue_many(self, numbers):
        from django.db import transaction
        from django_q.tasks import async_task

        with transaction.atomic():
            for number in numbers:
                async_task("bench.peers.run_djangoq.noop", number)

    def enqueue_one(self, number):
        from django_q.tasks import async_task

        async_task("bench.peers.run_djangoq.noop", number)

    def worker_commands(self, workers):
        return [([sys.executable, "-m", "django", "qcluster"],
                 {"ATP_PEERS_WORKERS": str(workers)})]

    def close(self):
        from django.db import connections

        connections.close_all()
