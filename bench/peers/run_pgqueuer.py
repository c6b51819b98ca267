"""PgQueuer on PostgreSQL through asyncpg, as its README sets it up: an ``async``
entrypoint, workers started by ``pgq run`` at its defaults (batches of 10, completions
buffered, LISTEN/NOTIFY, every table logged: durability ``durable``)."""

import asyncio
import sys
from contextlib import asynccontextmanager

from bench.peers import base
from bench.peers.body import record

ENTRYPOINT = "noop"


@asynccontextmanager
async def create_pgqueuer():
    """Yield the worker's PgQueuer (``pgq run bench.peers.run_pgqueuer:create_pgqueuer``)."""
    import asyncpg
    from pgqueuer import PgQueuer
    from pgqueuer.db import AsyncpgDriver

    connection = await asyncpg.connect(base.postgres_url(Runner.name))
    pgq = PgQueuer(AsyncpgDriver(connection))

    @pgq.entrypoint(ENTRYPOINT)
    async def noop(job):
        record(job.payload.decode())

    try:
        yield pgq
    finally:
        await connection.close()


class Runner(base.Runner):
    name = "pgqueuer"
    distribution = "pgqueuer"
    bulk_api = "Queries.enqueue with lists, 1,000 a call"
    configuration = ("one `pgq run` process per worker, its defaults (batch size 10, "
                     "buffered completions, durable tables); async entrypoint")

    def __init__(self):
        self.url = base.postgres_url(self.name)
        # One loop for the runner's life: its connection belongs to it.
        self.loop = asyncio.new_event_loop()
        self.connection = None

    def _run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    def prepare(self):
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        base.recreate_database(self.url)
        self.connection = self._run(asyncpg.connect(self.url))
        self.queries = Queries(AsyncpgDriver(self.connection))
        self._run(self.queries.install())

    def empty(self):
        self._run(self.queries.clear_queue())
        self._run(self.queries.clear_queue_log())
        self._run(self.queries.clear_statistics_log())

    def enqueue_many(self, numbers):
        numbers = list(numbers)
        self._run(self.queries.enqueue([ENTRYPOINT] * len(numbers),
                                       [str(number).encode() for number in numbers],
                                       [0] * len(numbers)))

    def enqueue_one(self, number):
        self._run(self.queries.enqueue(ENTRYPOINT, str(number).encode()))

    def worker_commands(self, workers):
        command = [sys.executable, "-m", "pgqueuer", "run", "--log-level", "WARNING",
                   "bench.peers.run_pgqueuer:create_pgqueuer"]
        return [(command, {})] * workers

    def close(self):
        if self.connection is not None:
            self._run(self.connection.close())
        self.loop.close()
