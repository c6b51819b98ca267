"""``atp doctor``: what is wrong with the queue and its settings now, each finding with
what to do about it. It only reads, so it may run on a live system at any time.

It looks at: the queue's written invariants (``atp.invariants``); tasks leased to a
daemon that stopped or fell silent; the clock of this host against the database's;
the space the tables take and waste; and the system checks of atp's settings.
"""

import datetime
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field

from django.apps import apps
from django.core import checks
from django.db import connections, router

from atp import stats
from atp.cli.report import Report, stamp, table
from atp.conf import conf
from atp.db import database_now
from atp.engine.databases import database_of
from atp.invariants import check_queue
from atp.models import Instance, Task
from atp.presentation import format_duration

#: A host clock this far from the database's, beyond what the reading itself can tell,
#: is worth setting right: an ``eta`` given from this host is off by as much.
CLOCK_SKEW_TOLERANCE_SECONDS = 1.0
#: Tasks named in one finding's message; its ``tasks`` list them all...
TASKS_NAMED = 10
#: ...up to this many for one way of breaking an invariant (``check_queue``'s limit).
VIOLATIONS_LISTED = 100
BUG = "if it lasts, it is a bug of atp: report it with this output"

#: What to do about a broken rule of ``atp.invariants``, by rule.
INVARIANT_ADVICE = {
    "accepted-queued": "these tasks do not run; run doctor again in a few seconds, and if "
                       "they remain, cancel and re-enqueue them (manage.py atp cancel ID...; "
                       f"manage.py atp reenqueue ID...); {BUG}",
    "in-flight-leased": "a live daemon restarts the tasks of a daemon it declares dead; if "
                        f"they remain, re-enqueue them (manage.py atp reenqueue ID...); {BUG}",
    "ended-off-queue": f"their queue rows stay until their daemon lets go of them; {BUG}",
    "queue-row-copies": f"claims and named tasks read the copy; {BUG}",
    "history-ends-in-state": f"the task's history no longer tells its story; {BUG}",
}


@dataclass(frozen=True)
class Finding:
    """One problem: which ``check`` found it, what it is, what to do, the tasks named."""

    check: str
    message: str
    advice: str
    tasks: list = field(default_factory=list)


def doctor():
    """Report every finding (exits 1 when there is one), the clock and the tables' sizes."""
    alias = router.db_for_read(Instance)
    findings = _invariants()
    now, clock, skew = _clock(alias)
    findings += skew + _lost_leases(now) + _system_checks()
    sizes = _table_sizes(alias)
    findings += [Finding("table-space", _space(size), remedy) for size, remedy in sizes or ()
                 if remedy]
    document = {
        "healthy": not findings,
        "findings": [asdict(finding) for finding in findings],
        "clock": clock,
        "tables": None if sizes is None else [
            {"table": size.table, "bytes": size.bytes, "rows": size.rows,
             "dead_rows": size.dead_rows, "free_bytes": size.free_bytes} for size, _ in sizes],
    }
    problem = f"doctor found {len(findings)} problem{'s' * (len(findings) != 1)}" if findings else ""
    return Report(document, _lines(findings, clock, sizes), problem)


def _invariants():
    grouped = defaultdict(list)
    for violation in check_queue(limit=VIOLATIONS_LISTED):
        grouped[violation.rule, violation.detail].append(violation.task)
    findings = []
    for (rule, detail), pks in grouped.items():
        tasks = _tasks(pks)
        if len(pks) >= VIOLATIONS_LISTED:
            tasks += f" (the first {VIOLATIONS_LISTED}: there may be more)"
        findings.append(Finding("invariant", f"{tasks} break {rule}: {detail}",
                                INVARIANT_ADVICE[rule], pks))
    return findings


def _clock(alias):
    """Return the database's time, the clock document, and the skew finding (a list)."""
    before = time.time()
    now = database_now(alias)
    after = time.time()
    # The database read its clock somewhere between the two readings of ours.
    host = datetime.datetime.fromtimestamp((before + after) / 2, tz=datetime.UTC)
    ahead = (host - now).total_seconds()
    uncertainty = (after - before) / 2
    clock = {"database_now": stamp(now), "host_ahead_seconds": round(ahead, 6),
             "uncertainty_seconds": round(uncertainty, 6)}
    if abs(ahead) - uncertainty <= CLOCK_SKEW_TOLERANCE_SECONDS:
        return now, clock, []
    side = "ahead of" if ahead > 0 else "behind"
    return now, clock, [Finding(
        "clock-skew", f"this host's clock is {abs(ahead):.1f} s {side} the database's",
        "set both clocks right (NTP: chrony or systemd-timesyncd). Liveness never compares "
        "clocks, but an eta= given on this host starts its task that much off, and the "
        "pages' waits and ages are off as much")]


def _lost_leases(now):
    try:
        daemons = stats.daemons_gone_with_leases()
    except (TypeError, ValueError, OverflowError):  # ATP_DAEMON_TIMEOUT_SECONDS is not a number
        return [Finding("stuck", "leases not checked: ATP_DAEMON_TIMEOUT_SECONDS is not a "
                        "number of seconds", "set it right (see the system check)")]
    findings = []
    for daemon in daemons:
        pks = list(Task.objects.filter(daemon=daemon).order_by("pk")
                   .values_list("instance_id", flat=True)[:TASKS_NAMED])
        where = f"daemon #{daemon.pk} ({daemon.host}, pid {daemon.pid})"
        held = f"{daemon.held} task{'s' * (daemon.held != 1)}"
        if daemon.stopped is not None:
            findings.append(Finding(
                "dead-daemon-leases",
                f"{where} was declared stopped at {stamp(daemon.stopped)} but still holds "
                f"{held} ({_tasks(pks, daemon.held)})",
                "nothing releases these leases by itself (a daemon lets go of them as it "
                "stops): run doctor again, and if they remain, restart its tasks from "
                f"manage.py shell: atp.engine.restart_leases({daemon.pk}, 'released by hand'); "
                f"{BUG}", pks))
        else:
            findings.append(Finding(
                "stuck",
                f"{held} ({_tasks(pks, daemon.held)}) stuck on {where}, not heard from for "
                f"{format_duration(now - daemon.heartbeat)}",
                "a live daemon declares a silent one dead and restarts its tasks within "
                f"ATP_DAEMON_TIMEOUT_SECONDS ({conf.DAEMON_TIMEOUT_SECONDS:g} s): start atpd if "
                "none runs (manage.py atp status lists them); if one runs, read its log: it "
                "cannot reach the database, or is stuck itself", pks))
    return findings


def _system_checks():
    return [
        Finding("system-check", f"{message.id}: {message.msg}",
                message.hint or "see docs/settings.md")
        for message in checks.run_checks()
        if (message.id or "").startswith("atp.") and message.level >= checks.WARNING
        and not message.is_silenced()
    ]


def _table_sizes(alias):
    """Return ``(TableSize, remedy)`` pairs of atp's tables, or None where unknown."""
    tables = [model._meta.db_table
              for model in apps.get_app_config("atp").get_models(include_auto_created=True)]
    connection = connections[alias]
    database = database_of(connection)
    with connection.cursor() as cursor:
        sizes = database.table_sizes(cursor, tables)
    return None if sizes is None else [(size, database.space_remedy(size)) for size in sizes]


def _space(size):
    name = size.table or "the database"
    wasted = (f"{size.dead_rows} dead rows beside {size.rows} live ones"
              if size.dead_rows is not None else f"{_bytes(size.free_bytes)} free")
    return f"{name} takes {_bytes(size.bytes)}, {wasted}"


def _tasks(pks, count=None):
    count = len(pks) if count is None else count
    named = ", ".join(f"#{pk}" for pk in pks[:TASKS_NAMED])
    more = f" and {count - TASKS_NAMED} more" if count > TASKS_NAMED else ""
    return f"task{'s' * (count != 1)} {named}{more}"


def _duration(seconds):
    return format_duration(datetime.timedelta(seconds=seconds))


def _bytes(amount):
    if amount is None:
        return None
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if amount < 1024 or unit == "GiB":
            return f"{amount:.0f} {unit}" if unit == "bytes" else f"{amount:.1f} {unit}"
        amount /= 1024
    return None


def _lines(findings, clock, sizes):
    lines = [f"{len(findings)} problem{'s' * (len(findings) != 1)} found:" if findings
             else "No problem found."]
    for finding in findings:
        lines += [f"- [{finding.check}] {finding.message}", f"  what to do: {finding.advice}"]
    ahead, within = clock["host_ahead_seconds"], clock["uncertainty_seconds"]
    lines += ["", f"Clock: this host is {_duration(abs(ahead))} "
              f"{'ahead of' if ahead >= 0 else 'behind'} the database (read within "
              f"{_duration(within)})", ""]
    if sizes is None:
        return lines + ["Tables: their sizes are not known on this database."]
    return lines + ["Tables:", *table(
        ("table", "size", "rows", "dead rows", "free"),
        [(size.table or "(whole database)", _bytes(size.bytes), size.rows, size.dead_rows,
          _bytes(size.free_bytes)) for size, _ in sizes])]
