"""Prepare the demo: a login, the demo task types and some work in the queue."""

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

import atp
from atp.engine import sync_declared_types


class Command(BaseCommand):
    help = "Create (or reset) the demo login, register the demo task types and enqueue demo work."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="demo", help="Login to create or reset.")
        parser.add_argument(
            "--tasks", type=int, default=12,
            help="How many demo tasks to enqueue (default 12, 0 for none).",
        )

    def handle(self, *, username, tasks, **options):
        if tasks < 0:
            raise CommandError("--tasks must be 0 or more")
        password = secrets.token_urlsafe(9)
        user, _ = get_user_model().objects.get_or_create(username=username)
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        types = sync_declared_types()
        enqueued = [atp.enqueue(*self.demo_task(number)) for number in range(tasks)]
        self.stdout.write(f"Task types: {', '.join(t.identifier for t in types)}")
        self.stdout.write(f"Enqueued {len(enqueued)} demo tasks.")
        self.stdout.write(self.style.SUCCESS(
            f"Log in at http://127.0.0.1:8000/admin/ as {username!r} with password {password!r}"
        ))

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
