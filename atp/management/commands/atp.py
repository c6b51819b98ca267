"""``manage.py atp``: the operator's command line (status, types, enqueue, reenqueue,
cancel, run-again, run-now, retry, purge, doctor). Options only: the work is in ``atp.cli``."""

import argparse
import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from atp.cli import arguments, doctor, reading, steering
from atp.cli.report import BAD_ARGUMENTS, REFUSED
from atp.states import Status


class SubcommandParser(CommandParser):
    """A subcommand's parser: a usage error is one line on standard error, exit 2."""

    def error(self, message):
        if self.called_from_command_line:
            self.exit(BAD_ARGUMENTS, f"{self.prog}: error: {message} (see --help)\n")
        raise CommandError(f"Error: {message}", returncode=BAD_ARGUMENTS)


class Command(BaseCommand):
    # doctor reports what the system checks flag rather than refusing to run, and an
    # operator must be able to look at a queue whose settings are wrong.
    requires_system_checks = []
    help = ("Watch and steer atp's queue: status, types, enqueue, reenqueue, cancel, run-again, "
            "run-now, retry, purge, doctor.")

    def add_arguments(self, parser):
        common = CommandParser(add_help=False)
        common.add_argument("--json", action="store_true",
                            help="Print one JSON document (stable keys) instead of text.")
        # Django's own options, taken after the subcommand too (manage.py atp status
        # --settings=...), as every other command takes them anywhere. SUPPRESS keeps
        # the subcommand from resetting what was given before it.
        for flags, extra in (
            (["-v", "--verbosity"], {"type": int, "choices": [0, 1, 2, 3]}),
            (["--settings"], {}), (["--pythonpath"], {}),
            (["--traceback"], {"action": "store_true"}),
            (["--no-color"], {"action": "store_true"}),
            (["--force-color"], {"action": "store_true"}),
        ):
            common.add_argument(*flags, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **extra)
        subcommands = parser.add_subparsers(dest="subcommand", metavar="SUBCOMMAND",
                                            required=True, parser_class=SubcommandParser)

        def add(name, help_text):
            # Said to each parser: Django 4.2 does not hand it down to subparsers.
            return subcommands.add_parser(
                name, parents=[common], help=help_text, description=help_text,
                called_from_command_line=parser.called_from_command_line)

        add("status", "Live tasks per type and state, the waiting queue, the live daemons.")
        add("types", "Each task type and what an operator tunes on it.")

        enqueue = add("enqueue", "Queue a task (atp.enqueue); print its id.")
        enqueue.add_argument("type", metavar="TYPE", help="The task type's identifier.")
        enqueue.add_argument("--inputs", type=arguments.json_value, default=None, metavar="JSON",
                             help="The task's inputs, as JSON (default: null).")
        enqueue.add_argument("--identifier", default=None, metavar="NAME",
                             help="Name the task (refused while a task of the type has the name).")
        enqueue.add_argument("--priority", type=arguments.integer, default=0, metavar="N",
                             help="Higher runs first (default 0).")
        enqueue.add_argument("--countdown", type=arguments.non_negative_float, default=None,
                             metavar="S", help="Start no sooner than S seconds from now.")

        for name, help_text in (
            ("reenqueue", "Put tasks back in the queue (in flight, failed or cancelled ones)."),
            ("cancel", "Cancel live tasks."),
            ("run-again", "Queue a new task with each ended task's inputs (the ended one stays)."),
            ("run-now", "Make delayed tasks runnable now."),
        ):
            verb = add(name, help_text)
            verb.add_argument("ids", nargs="+", type=arguments.task_id, metavar="ID",
                              help="Task numbers.")

        retry = add("retry", "Re-enqueue every task of a type in a state, in batches.")
        retry.add_argument("--type", required=True, metavar="TYPE", help="The task type.")
        retry.add_argument("--state", type=str.upper, default=Status.FAILED,
                           choices=[str(state) for state in steering.RETRIED_STATES],
                           help="Tasks in this state (default FAILED).")
        retry.add_argument("--since", type=arguments.duration, default=None, metavar="DURATION",
                           help="Only tasks that got there within DURATION (90s, 15m, 2h, 7d...).")
        retry.add_argument("--dry-run", action="store_true",
                           help="Say how many tasks match, change nothing.")

        purge = add("purge", "Delete ended tasks (atp.purge_finished).")
        purge.add_argument("--type", default=None, metavar="TYPE", help="Only this task type.")
        purge.add_argument("--older-than", type=arguments.duration, default=None,
                           metavar="DURATION",
                           help="Tasks that ended longer ago (default: past their type's retention).")

        add("doctor", "What is wrong now (invariants, stuck tasks, clocks, tables, settings), "
                      "with what to do; exits 1 when something is.")

    def handle(self, *args, **options):
        report = self._run(options["subcommand"], options)
        if options["json"]:
            self.stdout.write(json.dumps(report.document, indent=2, sort_keys=True))
        elif report.lines:
            self.stdout.write("\n".join(report.lines))
        if report.problem:
            raise CommandError(report.problem, returncode=REFUSED)

    def _run(self, subcommand, options):
        if subcommand == "status":
            return reading.status()
        if subcommand == "types":
            return reading.types()
        if subcommand == "enqueue":
            return steering.enqueue(options["type"], options["inputs"],
                                    identifier=options["identifier"],
                                    priority=options["priority"], countdown=options["countdown"])
        if subcommand in steering.VERBS:
            return steering.steer(subcommand, options["ids"])
        if subcommand == "retry":
            return steering.retry(options["type"], Status(options["state"]), options["since"],
                                  dry_run=options["dry_run"])
        if subcommand == "purge":
            return steering.purge(options["type"], options["older_than"])
        return doctor.doctor()
