"""Celery with Redis as its broker (or RabbitMQ, its documented default, with
``--celery-broker amqp``), no result backend (its default), a prefork worker of N
processes, every other setting at its default (prefetch multiplier 4, early ack)."""

import os
import sys

from celery import Celery, group

from bench.peers import base
from bench.peers.body import record

#: Celery's database number on the Redis server.
REDIS_DATABASE = 2


def broker_url():
    if os.environ.get(base.CELERY_BROKER_ENV, "redis") == "amqp":
        return os.environ.get(base.AMQP_ENV, base.AMQP_DEFAULT)
    return base.redis_url(REDIS_DATABASE)


app = Celery("peers", broker=broker_url())


@app.task(name="noop")
def noop(number):
    record(number)


class Runner(base.Runner):
    name = "celery"
    distribution = "celery"
    bulk_api = "group(...).apply_async(), 1,000 a call"
    configuration = ("`celery worker -c N` (prefork), no result backend, its defaults "
                     "(prefetch multiplier 4, early ack)")

    def __init__(self):
        self.store = "RabbitMQ" if broker_url().startswith("amqp") else "Redis"

    def prepare(self):
        self.empty()

    def empty(self):
        if self.store == "Redis":
            import redis

            redis.Redis.from_url(broker_url()).flushdb()
        else:
            app.control.purge()

    def enqueue_many(self, numbers):
        group(noop.s(number) for number in numbers).apply_async()

    def enqueue_one(self, number):
        noop.delay(number)

    def worker_commands(self, workers):
        return [([sys.executable, "-m", "celery", "--app", "bench.peers.run_celery", "worker",
                  "--concurrency", str(workers), "--loglevel", "WARNING"], {})]
