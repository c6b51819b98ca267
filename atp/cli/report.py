"""What a subcommand hands back, and how it is shown: a document for ``--json``, lines
for a person."""

from dataclasses import dataclass, field

from django.core.management.base import CommandError

#: Exit codes: done or healthy; a verb refused or ``doctor`` found a problem; bad arguments.
OK, REFUSED, BAD_ARGUMENTS = 0, 1, 2


@dataclass
class Report:
    """A subcommand's outcome: ``document`` (stable keys, JSON types), ``lines`` to print,
    and ``problem``: when set, the one line that says why the command exits 1."""

    document: dict
    lines: list = field(default_factory=list)
    problem: str = ""


def bad_argument(message):
    """Return the error of an argument only the database can refuse (an unknown type or
    task): it exits 2, as argparse's usage errors do, and nothing was changed."""
    return CommandError(message, returncode=BAD_ARGUMENTS)


def seconds(delta):
    """Return a timedelta as seconds for a JSON document (None stays None)."""
    return None if delta is None else delta.total_seconds()


def stamp(moment):
    """Return an aware datetime as ISO 8601 for a JSON document (None stays None)."""
    return None if moment is None else moment.isoformat()


def table(headers, rows, indent="  "):
    """Return ``rows`` under ``headers`` as aligned lines: text left, numbers right."""
    cells = [[str(header) for header in headers]] + [
        ["-" if value is None else str(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [all(isinstance(row[i], (int, float)) for row in rows) and bool(rows)
               for i in range(len(headers))]
    return [
        indent + "  ".join(
            cell.rjust(width) if is_number else cell.ljust(width)
            for cell, width, is_number in zip(row, widths, numeric, strict=True)
        ).rstrip()
        for row in cells
    ]
