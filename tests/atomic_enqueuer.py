"""An application process for the SQLite load test: enqueues in ``atomic()`` blocks.

Run as ``python -m tests.atomic_enqueuer DIRECTORY BLOCKS`` with the test's environment
(ATP_TEST_DB_NAME). Each block enqueues 4 tasks of ``tests.exclusive_sleep`` with two
verbs and nothing else, as a view under ``ATOMIC_REQUESTS`` would. It prints, as JSON,
the keys of the tasks of the blocks that committed and the errors of those that failed.
"""

import json
import os
import sys

import django


def main(directory, blocks):
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()
    from django.db import transaction

    import atp

    committed, errors = [], []
    inputs = {"directory": directory, "seconds": 0.005}
    for _ in range(blocks):
        try:
            with transaction.atomic():
                tasks = [atp.enqueue("tests.exclusive_sleep", inputs),
                         *atp.enqueue_many("tests.exclusive_sleep", [inputs] * 3)]
        except Exception as exc:  # what the test counts: any block that failed
            errors.append(f"{type(exc).__name__}: {exc}")
        else:
            committed += [task.pk for task in tasks]
    print(json.dumps({"committed": committed, "errors": errors}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
