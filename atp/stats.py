"""Read-only figures about the queue, for the dashboard, its charts, the admin, the
metrics, the health probe and operators.

Each query reads something small however many ended tasks are kept: live tasks are
counted through the queue table (which holds only them), ended ones only for a recent
window, through the partial index on ended tasks, and the history only for a window,
through its index by state and time. Nothing here writes.
"""

import datetime
from dataclasses import dataclass

from django.db.models import (
    Case,
    Count,
    Min,
    Q,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Now

from atp.conf import conf
from atp.db import database_now
from atp.engine import semaphores
from atp.engine.base import database
from atp.engine.semaphores import gated_types
from atp.models import Batch, Daemon, Instance, Schedule, Task, Type
from atp.states import LIVE, TERMINAL, Status

#: How far back the dashboard counts ended tasks.
RECENT = datetime.timedelta(hours=1)


def live_counts():
    """Return ``{(type_id, status): count}`` of the live tasks."""
    rows = (
        Task.objects.filter(instance__status__in=LIVE)
        .values_list("type_id", "instance__status").annotate(count=Count("pk")).order_by()
    )
    return {(type_id, status): count for type_id, status, count in rows}


def ended_counts(within=RECENT, type_ids=None):
    """Return ``{(type_id, status): count}`` of the tasks (of ``type_ids``, default all)
    that ended within ``within``."""
    # Naming every type lets the (type, finished) index be read as one short range per
    # type; a bare time range cannot use it and would read the whole table.
    if type_ids is None:
        type_ids = list(Type.objects.values_list("pk", flat=True))
    rows = (
        Instance.objects.filter(
            type_id__in=type_ids, status__in=TERMINAL, finished__gte=Now() - Value(within)
        ).values_list("type_id", "status").annotate(count=Count("pk")).order_by()
    )
    return {(type_id, status): count for type_id, status, count in rows}


@dataclass(frozen=True)
class Waiting:
    """Tasks in the queue that no daemon has claimed."""

    runnable: int
    delayed: int
    oldest_since: datetime.datetime = None


def _waiting_figures():
    # Read through the claim index, which holds only the unclaimed rows.
    return {
        "runnable": Count("pk", filter=Q(not_before__lte=Now())),
        "delayed": Count("pk", filter=Q(not_before__gt=Now())),
        "oldest": Min("not_before", filter=Q(not_before__lte=Now())),
    }


def waiting():
    """Return how many tasks wait to be claimed, and since when the oldest runnable one can run."""
    figures = Task.objects.filter(daemon__isnull=True).aggregate(**_waiting_figures())
    return Waiting(figures["runnable"], figures["delayed"], figures["oldest"])


def waiting_by_type():
    """Return ``{type_id: Waiting}`` for the types that have tasks waiting to be claimed."""
    rows = (
        Task.objects.filter(daemon__isnull=True).values("type_id")
        .annotate(**_waiting_figures()).order_by()
    )
    return {row["type_id"]: Waiting(row["runnable"], row["delayed"], row["oldest"]) for row in rows}


#: The share of ``ATP_DAEMON_TIMEOUT_SECONDS`` after which a daemon not heard from is
#: shown as silent: still live (its tasks stay with it), but perhaps gone.
SILENT_SHARE = 0.5


def _is_live(prefix="", share=1.0):
    """Return the condition of a daemon heard from within ``ATP_DAEMON_TIMEOUT_SECONDS``
    (or ``share`` of it)."""
    timeout = datetime.timedelta(seconds=conf.DAEMON_TIMEOUT_SECONDS * share)
    return Q(**{f"{prefix}stopped__isnull": True, f"{prefix}heartbeat__gte": Now() - Value(timeout)})


def watched_daemons():
    """Return the daemons (not pull consumers) not stopped that are live or still hold
    leases, live ones first, with ``running`` (their leases), ``is_live`` and ``is_heard``
    (heard from within ``SILENT_SHARE`` of the time-out): a live daemon not heard is
    silent, one not live is dead (its tasks go back to the queue once a live daemon reaps
    it)."""
    live, heard = (Case(When(condition, then=Value(True)), default=Value(False))
                   for condition in (_is_live(), _is_live(share=SILENT_SHARE)))
    return list(
        Daemon.objects.filter(stopped__isnull=True, consumer__isnull=True)
        .annotate(running=Count("leases", distinct=True), is_live=live, is_heard=heard)
        .filter(Q(is_live=True) | Q(running__gt=0)).order_by("-is_live", "host", "pid")
    )


def live_daemons():
    """Return the daemons heard from within ``ATP_DAEMON_TIMEOUT_SECONDS``, with ``running`` counts."""
    return list(
        Daemon.objects.filter(_is_live(), consumer__isnull=True).annotate(running=Count("leases", distinct=True))
        .order_by("host", "pid")
    )


def daemons_gone_with_leases():
    """Return the daemons (not pull consumers, whose leases end at their deadline) that
    stopped, or were not heard from within ``ATP_DAEMON_TIMEOUT_SECONDS``, and still hold
    leases, with ``held``: how many. Their tasks stay where they are until a live daemon
    reaps the silent ones; nothing releases the leases of a stopped one."""
    return list(
        Daemon.objects.filter(consumer__isnull=True).exclude(_is_live())
        .annotate(held=Count("leases")).filter(held__gt=0).order_by("pk")
    )


def with_runners(types):
    """Annotate a queryset of types with ``runners``: how many live daemons run each."""
    return types.annotate(runners=Count("served_by", filter=_is_live("served_by__"), distinct=True))


def types_with_counts(types=None):
    """Return every type (or those of the queryset ``types``) with ``live`` (by state) and
    ``ended`` (recently, by state) counts, ``waiting`` (its accepted tasks), ``held`` (the
    same, for a paused type; else 0) and ``runners``, how many live daemons run it."""
    types = list(with_runners((Type.objects.all() if types is None else types).order_by("identifier")))
    live, ended = live_counts(), ended_counts(type_ids=[task_type.pk for task_type in types])
    for task_type in types:
        task_type.live = {s: live.get((task_type.pk, s), 0) for s in LIVE}
        task_type.ended = {s: ended.get((task_type.pk, s), 0) for s in TERMINAL}
        task_type.waiting = task_type.live[Status.ACCEPTED]
        # A paused type's tasks wait for the operator, not for a daemon.
        task_type.held = task_type.waiting if task_type.is_paused else 0
    return types


@dataclass(frozen=True)
class DaemonTotals:
    """The live daemons (not pull consumers) and the worker processes they run."""

    daemons: int
    workers: int


def live_daemon_totals():
    """Return how many daemons are live and how many workers they run together."""
    figures = Daemon.objects.filter(_is_live(), consumer__isnull=True).aggregate(
        daemons=Count("pk"), workers=Sum("workers"))
    return DaemonTotals(figures["daemons"], figures["workers"] or 0)


def claimable(waiting):
    """Return the part of ``waiting`` (as from ``waiting_by_type``) that daemons would claim
    now: the types with runnable tasks, less paused types (an operator holds them) and
    pull types (consumers lease their tasks, never a daemon)."""
    type_ids = [type_id for type_id, figures in waiting.items() if figures.runnable]
    held_ids = set().union(*_held_types(type_ids))
    return {type_id: waiting[type_id] for type_id in type_ids if type_id not in held_ids}


@dataclass(frozen=True)
class Queue:
    """The tasks waiting to be claimed, told apart: ``runnable``/``delayed``/``oldest_since``
    of the types daemons claim (as ``Waiting``), ``pull`` (tasks of pull types, waiting
    for a consumer's lease) and ``held`` (tasks of paused types, runnable or delayed)."""

    runnable: int
    delayed: int
    oldest_since: datetime.datetime
    pull: int
    held: int
    #: Runnable tasks waiting for a semaphore's slot or a key's token, not for a worker
    #: (not counted in ``runnable``).
    held_back: int = 0


def queue(waiting):
    """Return the ``Queue`` of ``waiting`` (as from ``waiting_by_type``)."""
    paused, pull = _held_types(list(waiting))
    claimed = {type_id: figures for type_id, figures in waiting.items()
               if type_id not in paused | pull}
    oldest = [figures.oldest_since for figures in claimed.values() if figures.oldest_since]

    def total(type_ids):
        return sum(waiting[type_id].runnable + waiting[type_id].delayed for type_id in type_ids)

    gated = gated_types([type_id for type_id, figures in claimed.items() if figures.runnable])
    held_back = semaphores.held_back(gated, database_now(database())) if gated else 0
    return Queue(
        runnable=sum(figures.runnable for figures in claimed.values()) - held_back,
        delayed=sum(figures.delayed for figures in claimed.values()),
        oldest_since=min(oldest) if oldest else None,
        pull=total(pull - paused), held=total(paused), held_back=held_back,
    )


def _held_types(type_ids):
    """Return ``(paused, pull)``: the sets of ``type_ids`` that are paused, and pull types."""
    if not type_ids:
        return set(), set()
    rows = Type.objects.filter(Q(is_paused=True) | Q(pull=True), pk__in=type_ids)
    rows = list(rows.values_list("pk", "is_paused", "pull"))
    return {pk for pk, paused, _ in rows if paused}, {pk for pk, _, pull in rows if pull}


def schedules(limit=10):
    """Return the enabled schedules due soonest (at most ``limit``), with their type."""
    return list(Schedule.objects.filter(enabled=True).select_related("type").order_by("next_run")[:limit])


def open_batches(limit=10):
    """Return the sealed batches not completed (newest first, at most ``limit``), each
    with ``members_total`` and ``members_ended``.

    Read through the index of open batches (a batch still being enqueued is in none:
    it is there a moment later) and the members' (batch, status) index.
    """
    return list(
        Batch.objects.filter(completed__isnull=True, sealed__isnull=False)
        .annotate(members_total=Count("members"),
                  members_ended=Count("members", filter=Q(members__status__in=TERMINAL)))
        .order_by("-pk")[:limit]
    )


def unserved_types(claimable_waiting):
    """Return the types of ``claimable_waiting`` (as from ``claimable``) that no live daemon
    runs, in identifier order, each with ``runnable``: how many of its tasks wait."""
    types = with_runners(Type.objects.filter(pk__in=list(claimable_waiting)))
    unserved = list(types.filter(runners=0).order_by("identifier")) if claimable_waiting else []
    for task_type in unserved:
        task_type.runnable = claimable_waiting[task_type.pk].runnable
    return unserved
