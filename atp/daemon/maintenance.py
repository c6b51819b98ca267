"""The maintenance a daemon does besides running tasks, each as one run-once function.

The supervisor calls them on a timer; tests call them directly. Any daemon may do
them for all: they are guarded so that several daemons doing them at once is safe.
"""

import datetime
import logging
import socket

import psutil

from atp import engine
from atp.conf import conf
from atp.models import Daemon

logger = logging.getLogger(__name__)


def reap_stale_daemons(me):
    """Restart the tasks of every other daemon silent past ``ATP_DAEMON_TIMEOUT_SECONDS``."""
    timeout = datetime.timedelta(seconds=conf.DAEMON_TIMEOUT_SECONDS)
    restarted = 0
    for daemon in engine.stale_daemons(timeout, exclude=me):
        count = engine.reap_daemon(
            daemon, f"daemon {daemon} stopped heartbeating", silent_for=timeout
        )
        logger.log(logging.WARNING if count else logging.INFO,
                   "daemon %s declared dead by %s: %s task(s) restarted", daemon, me, count)
        restarted += count
    return restarted


def reap_gone_daemons_on_this_host(me):
    """Restart at once the tasks of earlier daemons of this host whose process is gone.

    A daemon restarted after a crash (or a reboot) needs not wait for the heartbeat
    timeout: the host can tell for sure that the old process no longer exists.
    """
    restarted = 0
    candidates = Daemon.objects.filter(host=socket.gethostname(), stopped__isnull=True)
    for daemon in candidates.exclude(pk=me.pk):
        if _is_running(daemon):
            continue
        count = engine.reap_daemon(daemon, f"daemon {daemon} is gone (found by {me})")
        logger.log(logging.WARNING if count else logging.INFO,
                   "daemon %s is gone: %s task(s) restarted", daemon, count)
        restarted += count
    return restarted


def _is_running(daemon):
    try:
        process = psutil.Process(daemon.pid)
        # A recycled pid belongs to a process that started at another time; both times
        # come from this host's clock.
        return abs(process.create_time() - daemon.process_started) < 1
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # cannot tell (another user's process): leave it to the heartbeat


def purge_expired(max_batches=1):
    """Delete a batch of ended tasks past their type's retention; return how many."""
    return engine.purge_finished(max_batches=max_batches)


def prune_stopped_daemons():
    """Forget daemons stopped longer than ``ATP_DAEMON_RETENTION_SECONDS`` ago."""
    return engine.prune_daemons(conf.DAEMON_RETENTION_SECONDS)
