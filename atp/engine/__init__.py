"""The queue verbs: the only code that changes a task's state.

Admin actions, views, the CLI and the daemon call these; none of them updates queue
rows itself. Each verb is a guarded compare-and-set that writes the task's history
in the same transaction (see ``atp.engine.transitions``).
"""

from atp.engine.claim import claim_for_daemon, dequeue, next_due, settle_and_claim
from atp.engine.daemons import (
    heartbeat,
    heartbeat_counters,
    prune_daemons,
    reap_daemon,
    register_daemon,
    restart_leases,
    retire_daemon,
    serve_types,
)
from atp.engine.enqueue import enqueue, enqueue_many, enqueue_on_commit
from atp.engine.lifecycle import (
    expire_attempt,
    fail,
    fail_or_retry,
    finish,
    hand_back,
    release,
    restart,
    settle,
    snooze,
    start,
    start_and_load,
)
from atp.engine.maintenance import (
    delete_ended,
    delete_task,
    expire_waiting,
    purge_finished,
    purge_plan,
    purge_tombstones,
    purge_type_due,
)
from atp.engine.pull import complete, expire_leases, extend_lease, lease_tasks
from atp.engine.records import get_response, log, set_progress, set_response
from atp.engine.schedules import (
    declare_schedule,
    delete_schedule,
    enqueue_due,
    save_schedule,
    seconds_to_next_run,
    set_schedule_enabled,
    sync_declared_schedules,
)
from atp.engine.semaphores import set_semaphore
from atp.engine.steering import cancel, pause, reenqueue, resume, run_again, run_now, set_status
from atp.engine.types import (
    NOT_FOR_PULL,
    get_type,
    pause_type,
    purge_type,
    register_pull_type,
    register_task_type,
    resume_type,
    sync_declared_types,
    unregister_task_type,
    update_task_type,
)

__all__ = [
    "NOT_FOR_PULL",
    "cancel", "claim_for_daemon", "complete", "expire_leases", "extend_lease", "lease_tasks", "register_pull_type", "declare_schedule", "delete_ended", "delete_schedule", "delete_task", "dequeue", "enqueue", "enqueue_due", "enqueue_many", "enqueue_on_commit", "expire_attempt", "expire_waiting", "fail", "fail_or_retry", "finish",
    "get_response", "get_type", "next_due", "hand_back", "heartbeat", "heartbeat_counters", "log", "pause", "pause_type",
    "prune_daemons", "purge_plan", "purge_type_due", "purge_finished", "purge_tombstones", "purge_type", "reap_daemon", "reenqueue", "register_daemon", "release",
    "register_task_type", "restart", "restart_leases", "resume", "resume_type", "retire_daemon", "run_again", "run_now",
    "save_schedule", "seconds_to_next_run", "serve_types", "set_schedule_enabled", "set_semaphore", "set_progress", "settle", "settle_and_claim", "snooze", "set_response", "set_status", "start", "start_and_load",
    "sync_declared_schedules", "sync_declared_types", "unregister_task_type", "update_task_type",
]
