"""``manage.py atpd``: run the Asynchronous Task Processing Daemon."""

import logging
import os
import sys

from django.core.management.base import BaseCommand, CommandError

from atp.cli.arguments import (
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    type_list,
)
from atp.conf import conf
from atp.daemon import DaemonConfig, Supervisor
from atp.daemon.config import DEFAULT_PREFETCH, default_workers
from atp.exceptions import AtpError

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class Command(BaseCommand):
    # Django's default, said out loud: a daemon started on settings that break its
    # guarantees (a NaN heartbeat makes a lease that never ends) would run tasks twice.
    requires_system_checks = "__all__"
    help = (
        "Run atpd, the Asynchronous Task Processing Daemon: claim queued tasks and run "
        "them in a pool of worker processes until SIGTERM or SIGINT."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--workers", type=positive_int, default=None,
            help=f"Worker processes (default: one per CPU, {default_workers()} here).",
        )
        parser.add_argument(
            "--types", type=type_list, default=None, metavar="TYPE[,TYPE...]",
            help="Run only tasks of these types (default: all).",
        )
        parser.add_argument(
            "--queues", type=type_list, default=None, metavar="QUEUE[,QUEUE...]",
            help="Run only tasks of these queues of Django's Tasks framework (the TASKS "
            "backends that are atp.backends.ATPBackend); with --types, of both.",
        )
        parser.add_argument(
            "--burst", action="store_true",
            help="Run what is runnable now, then exit (for cron jobs, tests, benchmarks).",
        )
        parser.add_argument(
            "--max-tasks-per-child", type=positive_int, default=None, metavar="N",
            help="Replace a worker after it ran N tasks.",
        )
        parser.add_argument(
            "--max-memory-per-child", type=positive_int, default=None, metavar="MB",
            help="Replace a worker whose memory (RSS) exceeds MB after a task.",
        )
        parser.add_argument(
            "--shutdown-timeout", type=non_negative_float, default=None, metavar="S",
            help="On SIGTERM/SIGINT, let running tasks finish for up to S seconds, then "
            "hand them back to the queue (default: ATP_SHUTDOWN_TIMEOUT_SECONDS, 30).",
        )
        parser.add_argument(
            "--poll-interval", type=positive_float, default=None, metavar="S",
            help="Look for runnable tasks every S seconds when not notified "
            "(default: ATP_POLL_INTERVAL_SECONDS, 1).",
        )
        parser.add_argument(
            "--prefetch", type=non_negative_int, default=DEFAULT_PREFETCH, metavar="N",
            help="Queue up to N claimed tasks behind each worker's running one when tasks are "
            "shorter than the daemon's database round; the queue follows the tasks' pace and "
            "is empty for long tasks. 0: never (default %(default)s).",
        )
        parser.add_argument(
            "--allow-root", action="store_true",
            help="Run as root although ATP_PICKLE_ENABLED is on (a forged pickle would then "
            "run code as root).",
        )
        parser.add_argument(
            "--reload", action="store_true",
            help="Restart atpd gracefully when the project's Python code changes (for "
            "development; a daemon runs the code it started with).",
        )
        parser.add_argument(
            "--log-level", choices=LOG_LEVELS, type=str.upper, default="INFO",
            help="Level of atpd's log on standard error (default INFO).",
        )

    def handle(self, *args, **options):
        _configure_logging(options["log_level"])
        _refuse_root_with_pickle(options["allow_root"])
        if options["reload"]:
            from atp.daemon.reload import run_with_reload

            sys.exit(run_with_reload())
        try:
            types = list(options["types"] or [])
            if options["queues"]:
                from atp.djangotasks.config import queue_types

                types += queue_types(options["queues"])
            config = DaemonConfig(
                workers=options["workers"] or default_workers(),
                types=tuple(types) if types else None,
                burst=options["burst"],
                max_tasks_per_child=options["max_tasks_per_child"],
                max_memory_per_child_mb=options["max_memory_per_child"],
                shutdown_timeout=options["shutdown_timeout"],
                poll_interval=options["poll_interval"],
                prefetch=options["prefetch"],
            )
            exit_code = Supervisor(config).run()
        except AtpError as exc:
            raise CommandError(str(exc)) from exc
        if exit_code:
            sys.exit(exit_code)


def _refuse_root_with_pickle(allowed):
    """Raise ``CommandError`` for atpd run as root with pickled inputs on, unless ``allowed``."""
    if os.geteuid() != 0 or conf.PICKLE_ENABLED is not True:
        return
    if allowed:
        logging.getLogger("atp").warning(
            "atpd runs as root with ATP_PICKLE_ENABLED on (--allow-root): a forged pickle "
            "would run code as root")
        return
    raise CommandError(
        "atpd refuses to run as root while ATP_PICKLE_ENABLED is on: whoever can write "
        "a task's inputs and forge their signature could run code as root. Run atpd as "
        "an unprivileged user (User= in its systemd unit), turn ATP_PICKLE_ENABLED off, "
        "or pass --allow-root to take that risk."
    )


def _configure_logging(level):
    logger = logging.getLogger("atp")
    logger.setLevel(level)
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(
            "%(asctime)s %(levelname)s %(processName)s[%(process)d] %(name)s: %(message)s"
        ))
        logger.addHandler(handler)
