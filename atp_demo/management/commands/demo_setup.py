"""Prepare the demo: its login, its task types, and with --reset a clean slate."""

from django.core.management.base import BaseCommand, CommandError

import atp
from atp.engine import sync_declared_types
from atp.models import Type
from atp_demo import scenarios
from atp_demo.login import ensure_login


class Command(BaseCommand):
    help = ("Create the demo login (kept across runs; a new password with --reset), register "
            "the demo task types, and with --reset remove the demo's tasks and schedule.")

    def add_arguments(self, parser):
        parser.add_argument("--username", default="demo", help="Login to create or keep.")
        parser.add_argument(
            "--reset", action="store_true",
            help="Start afresh: a new password, the demo's tasks and its schedule removed.",
        )
        parser.add_argument(
            "--tasks", type=int, default=0,
            help="How many assorted demo tasks to enqueue besides (default 0: the start "
                 "page's buttons start the scenarios).",
        )

    def handle(self, *, username, reset, tasks, **options):
        if tasks < 0:
            raise CommandError("--tasks must be 0 or more")
        types = sync_declared_types()
        if reset:
            self.remove_demo_work()
        password, is_new = ensure_login(username, reset=reset)
        enqueued = [atp.enqueue(*self.demo_task(number)) for number in range(tasks)]
        self.stdout.write(f"Task types: {', '.join(t.identifier for t in types)}")
        if enqueued:
            self.stdout.write(f"Enqueued {len(enqueued)} demo tasks.")
        self.stdout.write(self.style.SUCCESS(
            f"Log in as {username!r} with password {password!r} "
            f"({'new' if is_new else 'kept from the last run; make demo DEMO_RESET=1 for a new one'})"
        ))

    def remove_demo_work(self):
        scenarios.stop_ticking()
        cancelled = removed = 0
        for identifier in Type.objects.filter(identifier__startswith="demo.").values_list(
                "identifier", flat=True):
            cancelled += atp.purge_type(identifier, "the demo was reset")
            removed += atp.purge_finished(older_than=0, type=identifier)
        self.stdout.write(f"Reset: {removed} demo tasks removed ({cancelled} cancelled first).")

    @staticmethod
    def demo_task(number):
        kinds = [
            ("demo.sleep", {"seconds": 3 + number % 5}),
            ("demo.primes", {"limit": 100_000 * (1 + number % 4)}),
            ("demo.render", {"title": f"chart {number}", "values": [number % 7, 3, 5, 2, 8]}),
            ("demo.sleep", {"seconds": 10}),
            ("demo.render", {"title": f"<b>escaped {number}</b>", "values": [1, 2, 3]}),
            ("demo.fail", {"reason": f"demo failure {number}"}),
        ]
        return kinds[number % len(kinds)]
