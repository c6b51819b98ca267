"""``atp status`` and ``atp types``: what the queue holds and what an operator tunes.

Both only read, through ``atp.stats`` (the dashboard's figures), and date what they
show by the database's clock, which stamped the rows.
"""

from datetime import timedelta

from django.db import router

from atp import stats
from atp.cli.report import Report, seconds, stamp, table
from atp.db import database_now
from atp.models import Type
from atp.presentation import format_duration
from atp.states import LIVE, Status


def status():
    """Report the live tasks per type and state, the waiting queue and the live daemons."""
    now = database_now(router.db_for_read(Type))
    by_type = stats.waiting_by_type()
    types = [_type_counts(task_type, by_type[task_type.pk].delayed if task_type.pk in by_type else 0)
             for task_type in stats.types_with_counts()]
    # What daemons would claim, as the dashboard counts it: pull types' tasks wait for a
    # consumer and paused types' are held, apart.
    waiting = stats.queue(by_type)
    oldest_wait = now - waiting.oldest_since if waiting.oldest_since else None
    daemons = [
        {"id": daemon.pk, "host": daemon.host, "pid": daemon.pid, "workers": daemon.workers,
         "running": daemon.running, "started": stamp(daemon.started),
         "heartbeat": stamp(daemon.heartbeat)}
        for daemon in stats.live_daemons()
    ]
    document = {
        "now": stamp(now),
        "types": [t for t in types if not t["pull"]],
        "pull_types": [t for t in types if t["pull"]],
        "waiting": {"runnable": waiting.runnable, "delayed": waiting.delayed,
                    "pull": waiting.pull, "held": waiting.held,
                    "held_back": waiting.held_back,
                    "oldest_runnable_since": stamp(waiting.oldest_since),
                    "oldest_wait_seconds": seconds(oldest_wait)},
        "daemons": daemons,
    }
    return Report(document, _status_lines(document, oldest_wait))


def _type_counts(task_type, delayed):
    live = {str(state): task_type.live[state] for state in LIVE}
    return {
        "type": task_type.identifier, "paused": task_type.is_paused, "pull": task_type.pull,
        "runners": task_type.runners, "live": live,
        # An unclaimed task not due yet is ACCEPTED too: shown apart, as it cannot run.
        "waiting": max(live[Status.ACCEPTED] - delayed, 0), "delayed": delayed,
        "ended_last_hour": {str(state): count for state, count in task_type.ended.items()},
    }


def _status_lines(document, oldest_wait):
    headers = ("type", "waiting", "delayed", "scheduled", "running", "paused",
               "ended 1 h", "daemons", "")
    lines = []
    for title, types in (("Task types", document["types"]), ("Pull types (leased by consumers)",
                                                             document["pull_types"])):
        if not types:
            continue
        rows = [(t["type"], t["waiting"], t["delayed"], t["live"][Status.SCHEDULED],
                 t["live"][Status.RUNNING], t["live"][Status.PAUSED],
                 sum(t["ended_last_hour"].values()), t["runners"], _marks(t)) for t in types]
        lines += [f"{title}:", *table(headers, rows), ""]
    if not document["types"] and not document["pull_types"]:
        lines += ["No task type is registered.", ""]
    waiting = document["waiting"]
    since = f" (the oldest for {format_duration(oldest_wait)})" if oldest_wait is not None else ""
    held_back = (f", {waiting['held_back']} held back (semaphore or key's rate)"
                 if waiting["held_back"] else "")
    lines += [f"Waiting: {waiting['runnable']} runnable{since}, {waiting['delayed']} delayed; "
              f"{waiting['held']} held (type paused){held_back}, {waiting['pull']} for pull "
              "consumers", ""]
    daemons = document["daemons"]
    lines.append(f"Live daemons: {len(daemons)}")
    if daemons:
        lines += table(("id", "host", "pid", "workers", "running", "heartbeat"), [
            (d["id"], d["host"], d["pid"], d["workers"], d["running"], d["heartbeat"])
            for d in daemons])
    return lines


def _marks(counts):
    marks = ["paused"] if counts["paused"] else []
    if not counts["pull"] and not counts["runners"] and counts["waiting"]:
        marks.append("no live daemon runs this type")
    return "; ".join(marks)


def types():
    """Report every type with what an operator tunes."""
    rows = [_tuned(task_type) for task_type in Type.objects.order_by("identifier")]
    lines = table(
        ("type", "kind", "timeout", "restarts", "retries", "retry until", "rate /s",
         "concurrency", "max queued", "retention", "paused"),
        [(t["type"], "pull" if t["pull"] else "push", _shown(t["timeout_seconds"]),
          t["max_restarts"], t["retry_limit"], _shown(t["age_limit_seconds"]), t["rate"],
          t["max_concurrency"], t["max_queued"], _shown(t["retention_seconds"]),
          "yes" if t["paused"] else "no") for t in rows],
    ) if rows else ["No task type is registered."]
    return Report({"types": rows}, lines)


def _tuned(task_type):
    return {
        "type": task_type.identifier, "handler": task_type.handler, "pull": task_type.pull,
        "timeout_seconds": seconds(task_type.timeout), "max_restarts": task_type.max_restarts,
        "retry_limit": task_type.retry_limit, "age_limit_seconds": seconds(task_type.age_limit),
        "max_snoozes": task_type.max_snoozes,
        "rate": task_type.rate, "bucket_size": task_type.bucket_size,
        "max_concurrency": task_type.max_concurrency, "max_queued": task_type.max_queued,
        "retention_seconds": seconds(task_type.retention), "paused": task_type.is_paused,
    }


def _shown(value):
    return None if value is None else format_duration(timedelta(seconds=value))
