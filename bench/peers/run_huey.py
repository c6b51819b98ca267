"""Huey with Redis storage (``RedisHuey``, its documented default: a blocking pop, results
kept), a consumer of N worker processes (``-k process``: processes, as every system's
workers here; Huey's default is one thread)."""

import sys

from huey import RedisHuey

from bench.peers import base
from bench.peers.body import record

#: Huey's database number on the Redis server.
REDIS_DATABASE = 1

huey = RedisHuey("peers", url=base.redis_url(REDIS_DATABASE))


@huey.task()
def noop(number):
    record(number)


class Runner(base.Runner):
    name = "huey"
    distribution = "huey"
    store = "Redis"
    bulk_api = "Task.map, a task per item (a loop of enqueues inside Huey)"
    configuration = ("`huey_consumer -w N -k process`, its defaults otherwise (blocking "
                     "pop, results kept)")

    def prepare(self):
        huey.storage.conn.flushdb()

    def empty(self):
        huey.storage.conn.flushdb()

    def enqueue_many(self, numbers):
        noop.map(numbers)

    def enqueue_one(self, number):
        noop(number)

    def worker_commands(self, workers):
        return [([sys.executable, "-m", "huey.bin.huey_consumer", "bench.peers.run_huey.huey",
                  "--workers", str(workers), "--worker-type", "process", "--quiet"], {})]
