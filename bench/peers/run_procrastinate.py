"""Procrastinate on PostgreSQL through psycopg 3 (its ``PsycopgConnector``), workers at
their defaults (concurrency 1, LISTEN/NOTIFY with a 5 s poll, jobs kept when done)."""

import sys

import procrastinate

from bench.peers import base
from bench.peers.body import record

NAME = "procrastinate"

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=base.postgres_url(NAME)))


@app.task(name="noop")
async def noop(number):
    record(number)


class Runner(base.Runner):
    name = NAME
    distribution = "procrastinate"
    bulk_api = "Task.batch_defer, 1,000 a call"
    configuration = ("one `procrastinate worker` process per worker, its defaults "
                     "(concurrency 1, LISTEN/NOTIFY); async task")

    def __init__(self):
        self.url = base.postgres_url(self.name)
        self.opened = False

    def prepare(self):
        base.recreate_database(self.url)
        app.open()
        self.opened = True
        app.schema_manager.apply_schema()

    def empty(self):
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as connection:
            connection.execute("TRUNCATE procrastinate_jobs CASCADE")

    def enqueue_many(self, numbers):
        noop.batch_defer(*({"number": number} for number in numbers))

    def enqueue_one(self, number):
        noop.defer(number=number)

    def worker_commands(self, workers):
        command = [sys.executable, "-m", "procrastinate", "--app",
                   "bench.peers.run_procrastinate.app", "worker"]
        return [(command, {})] * workers

    def close(self):
        if self.opened:
            app.close()
