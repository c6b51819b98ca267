"""atp's settings in ``make bench-peers``: ``bench.settings`` (its database named by
ATP_BENCH_DATABASE_URL), with the peers' no-op handler."""

from bench.settings import *  # noqa: F403

ATP_HANDLER_MODULES = ["bench.peers.run_atp"]
