"""Run atpd and the development server together until Ctrl-C."""

import signal
import socket
import subprocess
import sys
import threading
import time

from django.core.management import call_command
from django.core.management.base import BaseCommand

from atp_demo.login import read_login

#: How long the server may take to answer before the banner gives up waiting.
SERVER_START_SECONDS = 60


class Command(BaseCommand):
    help = ("Run atpd in the background and the development server until Ctrl-C, then stop "
            "both; say the addresses and the login once the server answers.")

    def add_arguments(self, parser):
        parser.add_argument("address", nargs="?", default="127.0.0.1:8000")
        parser.add_argument("--workers", default="4", help="atpd's worker processes.")

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
        threading.Thread(target=self.announce, args=(address, workers), daemon=True).start()
        try:
            call_command("runserver", address, use_reloader=False)
        finally:
            atpd.send_signal(signal.SIGTERM)
            atpd.wait()

    def announce(self, address, workers):
        """Say where to go and how to log in, once the server answers at ``address``."""
        host, _, port = address.rpartition(":")
        host = host or "127.0.0.1"
        give_up = time.monotonic() + SERVER_START_SECONDS
        while not _answers(host, int(port)):
            if time.monotonic() > give_up:
                return
            time.sleep(0.2)
        site = f"http://{host}:{port}"
        login = read_login()
        self.stdout.write(self.style.SUCCESS(
            f"\nThe django-atp demo is up, atpd runs {workers} workers beside it; Ctrl-C stops both.\n"
            f"  start page   {site}/\n"
            f"  dashboard    {site}/atp/\n"
            f"  admin        {site}/admin/\n"
            + (f"  login        {login[0]!r}, password {login[1]!r}\n" if login else
               "  login        none kept yet: run manage.py demo_setup\n")
        ))


def _answers(host, port):
    try:
        socket.create_connection((host, port), timeout=1).close()
    except OSError:
        return False
    return True


def _interrupt(signum, frame):
    raise KeyboardInterrupt
