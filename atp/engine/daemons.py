"""The registry of daemons: who holds leases on tasks, and what happens when one is gone.

A daemon proves it is alive by advancing its heartbeat counter (``beats``). Another
daemon declares it stopped once the counter has not advanced for
``ATP_DAEMON_TIMEOUT_SECONDS`` on the observer's own monotonic clock (``atp.liveness``),
never by comparing a stamp with a clock: a wall clock or the database server's clock
may step. The declaration, and the restart of its tasks, happen in one transaction that
re-checks the counter under the row lock: a heartbeat that lands first wins, and one
that lands after finds the daemon stopped.
"""

import datetime
import socket

from django.db.models import BooleanField, ExpressionWrapper, F, Q, Value
from django.db.models.functions import Now

from atp import processes
from atp.engine.base import load_on_access, pk_of, queue_write
from atp.engine.lifecycle import hand_back, release, restart
from atp.engine.locks import for_update, lock_task
from atp.exceptions import TaskNotFound
from atp.models import Daemon, Instance, Task, Type
from atp.states import IN_FLIGHT


@queue_write
def register_daemon(*, workers=0, types=()):
    """Record the calling process as a running daemon; return its ``Daemon``.

    It notes who the process is on this host (``atp.processes``), which tells a later
    daemon of the same host whether this one still runs.
    """
    me = processes.current()
    daemon = Daemon.objects.create(
        host=socket.gethostname(), pid=me.pid, boot_id=me.boot_id,
        pid_namespace=me.pid_namespace, process_start_ticks=me.start_ticks,
        started=Now(), heartbeat=Now(), workers=workers, types=",".join(types or ()),
    )
    return load_on_access(daemon, "started", "heartbeat")


@queue_write
def serve_types(daemon, type_ids):
    """Record that ``daemon`` runs the types ``type_ids`` (and no other) from now on.

    A type unregistered since the daemon read them is left out: its rows are locked
    before they are referred to, so a deletion either lands first (and the type is not
    found) or waits for this to commit (and takes the daemon's reference with it).
    """
    still_there = for_update(Type.objects.filter(pk__in=list(type_ids)).order_by("pk"))
    Daemon.objects.get(pk=pk_of(daemon)).serves.set(list(still_there.values_list("pk", flat=True)))


@queue_write
def heartbeat(daemon):
    """Record that ``daemon`` is alive; return False if it was declared stopped meanwhile."""
    return bool(
        Daemon.objects.filter(pk=pk_of(daemon), stopped__isnull=True)
        .update(heartbeat=Now(), beats=F("beats") + 1)
    )


@queue_write
def retire_daemon(daemon, reason="daemon stopped"):
    """Record that ``daemon`` stopped of its own accord; return how many tasks it handed back.

    Tasks it still holds go back to the queue without spending a restart (a paused
    one is held), and those an operator took from it are let go of: a stopped daemon
    is never reaped, so nothing may stay leased to it.
    """
    Daemon.objects.filter(pk=pk_of(daemon), stopped__isnull=True).update(stopped=Now())
    return _let_go_of_leases(daemon, reason, spends_restart=False)


@queue_write
def restart_leases(daemon, reason):
    """Restart every task ``daemon`` runs, each spending a restart, and let go of those
    an operator took from it; return how many were restarted."""
    return _let_go_of_leases(daemon, reason, spends_restart=True)


def _let_go_of_leases(daemon, reason, *, spends_restart):
    """Give up every lease of ``daemon``; return how many tasks in flight went back."""
    returned = 0
    for pk in list(Task.objects.filter(daemon_id=pk_of(daemon)).values_list("instance_id", flat=True)):
        try:
            returned += _let_go(pk, daemon, reason, spends_restart)
        except TaskNotFound:
            continue
    return returned


@queue_write
def _let_go(pk, daemon, reason, spends_restart):
    # Decided under the task's locks: an operator's change landing meanwhile turns a
    # restart into a release, rather than leaving the lease behind.
    locked = lock_task(pk)
    if locked.lease != pk_of(daemon):
        return False
    if locked.status not in IN_FLIGHT:
        release(pk, daemon=pk_of(daemon))
        return False
    verb = restart if spends_restart else hand_back
    verb(pk, reason, attempt=locked.attempt, daemon=daemon)
    return True


def heartbeat_counters(*, exclude=None):
    """Return the running daemons that heartbeat (not pull consumers, whose leases end at
    their deadline), each with its ``beats``, by key; without ``exclude``."""
    rows = Daemon.objects.filter(stopped__isnull=True, consumer__isnull=True).only("host", "pid", "beats")
    if exclude is not None:
        rows = rows.exclude(pk=pk_of(exclude))
    return {daemon.pk: daemon for daemon in rows}


def daemons_on_host(host, *, exclude=None):
    """Return the daemons recorded as running on ``host`` (not pull consumers: they have
    no process to look for), without ``exclude``."""
    rows = Daemon.objects.filter(host=host, stopped__isnull=True, consumer__isnull=True)
    if exclude is not None:
        rows = rows.exclude(pk=pk_of(exclude))
    return list(rows)


def leases_of(daemon):
    """Return the tasks ``daemon`` holds a lease on, as ``{pk: (status, attempt, overdue)}``:
    overdue when past its deadline on the database clock and not paused. One query."""
    return {
        pk: (status, attempt, overdue)
        for pk, status, attempt, overdue in Task.objects.filter(daemon_id=pk_of(daemon)).annotate(
            overdue=ExpressionWrapper(
                Q(deadline__lt=Now(), paused_since__isnull=True), output_field=BooleanField()
            )
        ).values_list("instance_id", "instance__status", "instance__attempt", "overdue")
    }


def task_states(pks):
    """Return ``{pk: (status, attempt)}`` of the tasks ``pks`` that exist; one query, none
    for no task."""
    if not pks:
        return {}
    return {
        pk: (status, attempt) for pk, status, attempt in
        Instance.objects.filter(pk__in=pks).values_list("pk", "status", "attempt")
    }


@queue_write
def reap_daemon(daemon, reason, *, beats=None):
    """Declare ``daemon`` stopped and restart every task it holds; return how many.

    With ``beats`` nothing happens unless its heartbeat counter still is ``beats`` when
    the row is locked (it was judged silent at that count). Each task spends a restart.
    """
    rows = Daemon.objects.filter(pk=pk_of(daemon), stopped__isnull=True)
    if beats is not None:
        rows = rows.filter(beats=beats)
    # FOR UPDATE, the one lock a claim's KEY SHARE on its daemon's row waits for: a
    # claim in progress commits first (and its tasks are restarted below), or sees
    # the daemon stopped and takes nothing.
    if not list(rows.select_for_update().values_list("pk", flat=True)):
        return 0
    rows.update(stopped=Now())
    return restart_leases(daemon, reason)


@queue_write
def prune_daemons(older_than):
    """Delete daemons stopped longer than ``older_than`` ago that nothing refers to; return how many.

    A daemon stays as long as a task of its records it (retention purges those), so
    pruning never rewrites task rows.
    """
    if not isinstance(older_than, datetime.timedelta):
        older_than = datetime.timedelta(seconds=older_than)
    gone = Daemon.objects.filter(
        stopped__lt=Now() - Value(older_than), leases__isnull=True, instances__isnull=True
    )
    deleted, _ = Daemon.objects.filter(pk__in=list(gone.values_list("pk", flat=True))).delete()
    return deleted
