"""A consumer process for the concurrency tests: claims tasks until none is left.

Run as ``python -m tests.claim_worker READY_FILE GO_FILE LIMIT`` with the test's
environment (ATP_TEST_DB_NAME). It registers a daemon, creates READY_FILE, waits for
GO_FILE so that all consumers start together, then prints what it claimed as JSON.
"""

import json
import os
import sys
import time

import django

BARRIER_TIMEOUT_SECONDS = 120
#: What a consumer spends on its tasks between claims, as a real one would.
WORK_SECONDS = 0.001


def main(ready_path, go_path, limit):
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()
    from atp import engine

    daemon = engine.register_daemon()
    open(ready_path, "w").close()
    give_up = time.monotonic() + BARRIER_TIMEOUT_SECONDS
    while not os.path.exists(go_path):
        if time.monotonic() > give_up:
            sys.exit("never told to go")
        time.sleep(0.002)
    claimed = []
    # An empty claim means every task left is taken or being taken by another consumer.
    while batch := engine.dequeue(daemon, limit=limit):
        claimed.extend(task.pk for task in batch)
        time.sleep(WORK_SECONDS)
    print(json.dumps({"daemon": daemon.pk, "claimed": claimed}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
