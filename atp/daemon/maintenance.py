"""The maintenance a daemon does besides running tasks, each as one run-once function.

The supervisor runs them from its table of duties (``atp.daemon.duties``); tests call
them directly. Any daemon may do them for all: they are guarded so that several
daemons doing them at once is safe.
"""

import datetime
import logging
import socket

from atp import engine, processes
from atp.conf import conf
from atp.daemon.lease import clock
from atp.db import database_now
from atp.engine import batches, upkeep
from atp.engine.base import database
from atp.engine.daemons import daemons_on_host
from atp.processes import Seen

logger = logging.getLogger(__name__)

#: How far apart the database's clock and this host's boot-time clock may be read.
BOOT_MARGIN = datetime.timedelta(seconds=1)


def reap_stale_daemons(me, watch):
    """Restart the tasks of every other daemon whose heartbeat counter ``watch`` (an
    ``atp.liveness.Watch`` this daemon keeps) saw stand still for
    ``ATP_DAEMON_TIMEOUT_SECONDS``; return how many."""
    others = engine.heartbeat_counters(exclude=me)
    silent = watch.silent({pk: daemon.beats for pk, daemon in others.items()},
                          conf.DAEMON_TIMEOUT_SECONDS)
    restarted = 0
    for pk, beats in silent.items():
        daemon = others[pk]
        count = engine.reap_daemon(
            daemon, f"daemon {daemon} stopped heartbeating", beats=beats
        )
        logger.log(logging.WARNING if count else logging.INFO,
                   "daemon %s declared dead by %s: %s task(s) restarted", daemon, me, count)
        restarted += count
    return restarted


def reap_gone_daemons_on_this_host(me):
    """Restart at once the tasks of earlier daemons of this host whose process is gone.

    A daemon restarted after a crash (or a reboot) needs not wait for the heartbeat
    timeout: the host can tell for sure that the old process no longer exists. A
    daemon that reports this host's name from another PID namespace, or from another
    machine, is not for this one to judge: it is left to the heartbeat timeout, with a
    warning.
    """
    restarted = 0
    booted = _boot_moment()
    for daemon in daemons_on_host(socket.gethostname(), exclude=me):
        seen = processes.see(daemon.identity)
        if seen is Seen.RUNNING:
            continue
        if seen is Seen.ELSEWHERE:
            if not _ran_before_this_boot(daemon, booted):
                _warn_of_a_twin(daemon, me)
                continue
            why = f"daemon {daemon} ran before this host rebooted (found by {me})"
        else:
            why = f"daemon {daemon} is gone (found by {me})"
        count = engine.reap_daemon(daemon, why)
        logger.log(logging.WARNING if count else logging.INFO,
                   "%s: %s task(s) restarted", why, count)
        restarted += count
    return restarted


def _boot_moment():
    """Return when this host booted, on the database clock (the boot-time clock counts
    seconds since boot, whatever happens to the wall clock)."""
    return database_now(database()) - datetime.timedelta(seconds=clock())


def _ran_before_this_boot(daemon, booted):
    # A daemon of this host's previous boot: another boot id, silent since before ours.
    mine = processes.boot_id()
    return bool(daemon.boot_id and mine and daemon.boot_id != mine
                and daemon.heartbeat < booted - BOOT_MARGIN)


def _warn_of_a_twin(daemon, me):
    logger.warning(
        "daemon %s reports this host's name (%s) but runs in another PID namespace or on "
        "another machine (boot id %s, %s; this one: %s, %s): give each host or container "
        "a host name of its own. Until then a dead daemon there is found by its silent "
        "heartbeat only.", daemon, me.host, daemon.boot_id or "unknown",
        daemon.pid_namespace or "unknown", me.boot_id or "unknown", me.pid_namespace or "unknown",
    )


def complete_batches():
    """Enqueue the on-complete task of each batch whose members all ended, once across
    daemons (see ``atp.engine.batches``); return how many."""
    return len(batches.complete_due())


def tend_batches(watch):
    """Seal the batches whose block's process ``watch`` (an ``atp.liveness.Watch`` this
    daemon keeps) saw fall silent for ``ATP_UNSEALED_BATCH_SECONDS``, and delete
    completed ones nothing is left of; return how many of each."""
    silent = watch.silent(batches.open_batches(), conf.UNSEALED_BATCH_SECONDS)
    return batches.seal_forgotten(silent), batches.purge_completed()


def expire_pull_leases():
    """End the pull leases past their deadline (see ``atp.engine.pull``); return how many
    tasks were restarted (or failed, their restarts spent)."""
    restarted = engine.expire_leases()
    if restarted:
        logger.warning("%s pull lease(s) expired: their tasks restarted", restarted)
    return restarted


def expire_waiting_tasks():
    """Cancel the waiting tasks whose ``expires`` passed (``atp.engine.maintenance``);
    return how many."""
    expired = engine.expire_waiting()
    if expired:
        logger.info("%s waiting task(s) expired: cancelled", expired)
    return expired


def enqueue_due_schedules():
    """Enqueue the due runs of every schedule, once across all daemons (see
    ``atp.engine.schedules``); return how many tasks, and the seconds until the next
    schedule comes due (None: none is enabled, or one is still due: another daemon
    holds it, and the next poll looks again). Costs one indexed query when none is due."""
    enqueued = 0
    seconds = engine.seconds_to_next_run()
    if seconds is not None and seconds <= 0:
        enqueued = len(engine.enqueue_due())
        seconds = engine.seconds_to_next_run()
    if seconds is not None and seconds <= 0:
        seconds = None
    return enqueued, seconds


def tend_queue_table():
    """Analyze or vacuum the queue table when autovacuum lags (PostgreSQL; see ``atp.engine.upkeep``)."""
    return upkeep.tend_queue_table()


def prune_stopped_daemons():
    """Forget daemons stopped longer than ``ATP_DAEMON_RETENTION_SECONDS`` ago."""
    return engine.prune_daemons(conf.DAEMON_RETENTION_SECONDS)
