"""The public Python API of django-atp; every name here is also importable from ``atp``.

    import atp

    @atp.task_type("reports.render", timeout=600)
    def render(task, inputs):
        ...

    instance = atp.enqueue("reports.render", {"report": 42}, identifier="report-42")

Functions taking a task accept an ``Instance`` or its primary key. Those that change
a task return it as it now is (an ``Instance`` passed in is refreshed in place), and
take ``by``, the user (or a name) to record in the task's history as who did it.
"""

from atp import engine
from atp.deferred import defer
from atp.engine import (
    delete_task,
    dequeue,
    enqueue,
    enqueue_many,
    enqueue_on_commit,
    extend_lease,
    get_response,
    get_type,
    lease_tasks,
    pause_type,
    pull,
    purge_finished,
    purge_type,
    register_pull_type,
    register_task_type,
    resume_type,
    set_semaphore,
    unregister_task_type,
)
from atp.engine.base import pk_of
from atp.engine.batches import batch
from atp.models import Instance
from atp.registry import task_type
from atp.states import Status

__all__ = [
    "Status", "batch", "cancel", "complete", "defer", "delete_task", "dequeue", "enqueue",
    "enqueue_many", "enqueue_on_commit", "extend_lease", "fail", "get_response", "get_type",
    "lease_tasks", "pause", "pause_type", "purge_finished", "purge_type", "reenqueue",
    "register_pull_type", "register_task_type", "resume", "resume_type", "run_again", "run_now", "schedule",
    "set_response", "set_semaphore", "set_status", "task_type", "unregister_task_type",
    "unschedule",
]


def _as_it_is_now(instance):
    if isinstance(instance, Instance):
        instance.refresh_from_db()
        return instance
    return Instance.objects.select_related("type").get(pk=pk_of(instance))


def reenqueue(instance, message="", *, by=None):
    """Put an in-flight, failed or cancelled task back in the queue; return it.

    A running attempt is abandoned (its daemon stops it); a failed or cancelled task
    gets a fresh restart budget. Raise ``InvalidTransition`` for a queued or finished
    task, ``TaskAlreadyExists`` if a live task took its identifier.
    """
    engine.reenqueue(instance, message, by=by)
    return _as_it_is_now(instance)


def set_status(instance, status, message="", *, by=None):
    """Move a task to ``status`` (an ``atp.Status``); return it.

    Raise ``InvalidTransition`` for a change the state table does not allow.
    """
    engine.set_status(instance, status, message, by=by)
    return _as_it_is_now(instance)


def pause(instance, message="", *, by=None):
    """Pause a running task: its worker is suspended and its time-out clock stops; return it."""
    engine.pause(instance, message, by=by)
    return _as_it_is_now(instance)


def resume(instance, message="", *, by=None):
    """Resume a paused task; return it."""
    engine.resume(instance, message, by=by)
    return _as_it_is_now(instance)


def cancel(instance, message="", *, by=None):
    """Cancel a queued or in-flight task (its daemon stops it); return it."""
    engine.cancel(instance, message, by=by)
    return _as_it_is_now(instance)


def run_again(instance, message="", *, by=None):
    """Queue a new task with an ended task's type, inputs, priority and tag; return the new
    task (the ended one stays as it is). Raise ``InvalidTransition`` for a task that has
    not ended; nothing is queued then."""
    return engine.run_again(instance, message, by=by)


def run_now(instance, message="", *, by=None):
    """Make a delayed task (an ``eta``, a ``countdown``, a retry's back-off) runnable now, so
    that the next claim of its type takes it; return it. Raise ``NotDelayed`` for a
    queued task already runnable, ``InvalidTransition`` for a task not queued."""
    engine.run_now(instance, message, by=by)
    return _as_it_is_now(instance)


def complete(task, response=None, content_type=None):
    """End a task leased with ``lease_tasks`` FINISHED, storing ``response`` if not None;
    return it. Raise ``LeaseExpired`` (or ``AttemptSuperseded``) once its lease expired
    or was taken over, ``InvalidTransition`` once an operator ended or re-enqueued it,
    ``InvalidResponse``; nothing changes then."""
    pull.complete(task, response, content_type)
    return _as_it_is_now(task)


def fail(task, message=""):
    """End the attempt of a task leased with ``lease_tasks`` as failed: retried by its
    type's retry policy while it allows, else FAILED; return it. Raise as ``complete``."""
    pull.fail(task, message)
    return _as_it_is_now(task)


def set_response(instance, data, content_type=None):
    """Store ``data`` (bytes, text or a JSON value) as the task's response; return the ``Response``."""
    return engine.set_response(instance, data, content_type)


def schedule(name, type_identifier, *, cron=None, every=None, timezone=None, inputs=None,
             priority=0, catch_up=1, enabled=True):
    """Enqueue a task of type ``type_identifier`` at each due time of ``cron`` or ``every``
    (seconds or a timedelta); return the ``Schedule``. Repeat to change it.

    ``name`` (letters, digits, ``_``, ``-``) names the schedule and its tasks
    (``sched-<name>-<due time>``). ``cron`` is read in UTC, or in ``timezone`` (such as
    ``"Europe/Paris"``). Each task gets ``inputs`` and ``priority``. After due times
    no daemon was there for, at most ``catch_up`` runs are enqueued, the latest (0:
    none more than ``ATP_SCHEDULE_GRACE_SECONDS`` late). Saved again with the same
    timetable it keeps its next due time; a new timetable, or enabling it, starts it
    from now; ``enabled`` is left as it is once an operator set it. Called while Django
    starts (at module level in an app's ``tasks`` module, where declarations belong),
    it touches no database and returns None: the schedule is written after
    ``migrate`` and as each atpd starts. Raise ``InvalidParameter``,
    ``TaskTypeNotFound``, ``InputsNotSerializable`` or ``InputsTooLarge``; nothing
    changes then.
    """
    return engine.declare_schedule(name, type_identifier, cron=cron, every=every,
                                   timezone=timezone, inputs=inputs, priority=priority,
                                   catch_up=catch_up, enabled=enabled)


def unschedule(name):
    """Delete schedule ``name`` (its tasks already queued stay); raise ``ScheduleNotFound``."""
    engine.delete_schedule(name)
