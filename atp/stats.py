"""Read-only figures about the queue, for the dashboard, the admin and operators.

Each query reads something small however many ended tasks are kept: live tasks are
counted through the queue table (which holds only them), ended ones only for a recent
window, through the partial index on ended tasks. Nothing here writes.
"""

import datetime
from dataclasses import dataclass

from django.db.models import Count, Min, Q, Value
from django.db.models.functions import Now

from atp.conf import conf
from atp.models import Daemon, Instance, Task, Type
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


def ended_counts(within=RECENT):
    """Return ``{(type_id, status): count}`` of the tasks that ended within ``within``."""
    # Naming every type lets the (type, finished) index be read as one short range per
    # type; a bare time range cannot use it and would read the whole table.
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


def waiting():
    """Return how many tasks wait to be claimed, and since when the oldest runnable one can run."""
    figures = Task.objects.filter(daemon__isnull=True).aggregate(
        runnable=Count("pk", filter=Q(not_before__lte=Now())),
        delayed=Count("pk", filter=Q(not_before__gt=Now())),
        oldest=Min("not_before", filter=Q(not_before__lte=Now())),
    )
    return Waiting(figures["runnable"], figures["delayed"], figures["oldest"])


def delayed_counts():
    """Return ``{type_id: count}`` of the unclaimed tasks that may not start yet."""
    rows = (
        Task.objects.filter(daemon__isnull=True, not_before__gt=Now())
        .values_list("type_id").annotate(count=Count("pk")).order_by()
    )
    return dict(rows)


def _is_live(prefix=""):
    """Return the condition of a daemon heard from within ``ATP_DAEMON_TIMEOUT_SECONDS``."""
    timeout = datetime.timedelta(seconds=conf.DAEMON_TIMEOUT_SECONDS)
    return Q(**{f"{prefix}stopped__isnull": True, f"{prefix}heartbeat__gte": Now() - Value(timeout)})


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


def types_with_counts():
    """Return every type with ``live`` (by state) and ``ended`` (recently, by state) counts,
    and ``runners``, how many live daemons run it."""
    live, ended = live_counts(), ended_counts()
    types = list(with_runners(Type.objects.order_by("identifier")))
    for task_type in types:
        task_type.live = {s: live.get((task_type.pk, s), 0) for s in LIVE}
        task_type.ended = {s: ended.get((task_type.pk, s), 0) for s in TERMINAL}
        task_type.waiting = task_type.live[Status.ACCEPTED]
    return types
