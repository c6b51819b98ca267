"""A process that opens a batch block, enqueues one member, says so, and waits to be killed.

Run as ``python -m tests.batch_owner OPENED_FILE`` with the test's environment."""

import os
import sys
import time

import django


def main(opened_path):
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()
    import atp

    with atp.batch("tests.done"):
        atp.enqueue("tests.member")
        open(opened_path, "w").close()
        time.sleep(600)


if __name__ == "__main__":
    main(sys.argv[1])
