"""django-tasks-db: Django's Tasks API (the django-tasks backport on Django 5.2) with its
database backend on PostgreSQL, ``db_worker`` processes at their defaults (one task at a
time, the table polled every second when it is empty)."""

import os
import sys

import django

from bench.peers import base
from bench.peers.body import record

SETTINGS = "bench.peers.settings_django_tasks"

# A task is checked against its backend when it is declared: Django must be set up
# before, here as in db_worker's process (where it is already, and this does nothing).
os.environ.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS)
django.setup()

from django_tasks import task  # noqa: E402


@task()
def noop(number):
    record(number)


class Runner(base.Runner):
    name = "django-tasks-db"
    distribution = "django-tasks-db"
    bulk_api = "a loop of Task.enqueue in one transaction (no bulk API)"
    configuration = ("one `db_worker` process per worker, its defaults (interval 1 s, "
                     "one task a claim)")

    def __init__(self):
        self.url = base.postgres_url(self.name)

    def prepare(self):
        from bench.database import set_up_django

        base.recreate_database(self.url)
        set_up_django(SETTINGS)

    def empty(self):
        from django_tasks_db.models import DBTaskResult

        DBTaskResult.objects.all().delete()

    def enqueue_many(self, numbers):
        from django.db import transaction

        with transaction.atomic():
            for number in numbers:
                noop.enqueue(number)

    def enqueue_one(self, number):
        noop.enqueue(number)

    def worker_commands(self, workers):
        return [([sys.executable, "-m", "django", "db_worker"], {})] * workers

    def close(self):
        from django.db import connections

        connections.close_all()
