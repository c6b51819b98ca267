"""Run atpd and the development server together until Ctrl-C."""

import signal
import subprocess
import sys

from django.core.management import call_command
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Run atpd in the background and the development server until Ctrl-C, then stop both."

    def add_arguments(self, parser):
        parser.add_argument("address", nargs="?", default="127.0.0.1:8000")
        parser.add_argument("--workers", default="2", help="atpd's worker processes.")

    def handle(self, *, address, workers, **options):
        # Ctrl-C or SIGTERM stop the server, whatever the shell that started us did
        # with those signals (a background job inherits SIGINT ignored).
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _interrupt)
        # A session of its own: Ctrl-C reaches the server only, and atpd gets one
        # SIGTERM from here, which lets its running tasks finish.
        # --reload: edit atp_demo/tasks.py and the daemon restarts with the new code.
        atpd = subprocess.Popen(
            [sys.executable, "manage.py", "atpd", "--workers", workers, "--shutdown-timeout", "5",
             "--reload"],
            start_new_session=True,
        )
        try:
            call_command("runserver", address, use_reloader=False)
        finally:
            atpd.send_signal(signal.SIGTERM)
            atpd.wait()


def _interrupt(signum, frame):
    raise KeyboardInterrupt
