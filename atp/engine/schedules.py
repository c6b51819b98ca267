"""Periodic tasks: saving schedules, and enqueueing their due runs once across all daemons.

Every daemon calls ``enqueue_due``. Each due schedule is handled in a transaction of
its own that locks the schedule's row, enqueues its due runs with ``enqueue`` and
moves its ``next_run`` past them: a second daemon skips the locked row (PostgreSQL,
MySQL: ``SKIP LOCKED``) or waits for the first to commit (SQLite serialises writers),
and then finds the schedule no longer due. So a due time is enqueued once, whatever
the number of daemons; a daemon that dies inside the transaction leaves nothing, and
the next daemon enqueues the run. Each run's task is named after the schedule and its
due time (``sched-nightly-20261125T101500Z``), so a second enqueue of the same run
while its task is live is refused too (``TaskAlreadyExists``).

The time is the database's clock; tests pass ``now``.
"""

import datetime
import logging

from django.apps import apps
from django.db import connections
from django.db.models.functions import Now

from atp import registry, schedules
from atp.conf import conf
from atp.db import database_now
from atp.engine.base import database, queue_write
from atp.engine.enqueue import PRIORITY_MAX, PRIORITY_MIN, check_inputs, enqueue
from atp.engine.locks import for_update
from atp.engine.transitions import write_history
from atp.engine.types import get_type
from atp.exceptions import AtpError, InvalidParameter, ScheduleNotFound, TaskAlreadyExists
from atp.models import Schedule, Type
from atp.serialization import dump_json, load_json

logger = logging.getLogger(__name__)


def declare_schedule(name, type_identifier, *, cron=None, every=None, timezone=None,
                     inputs=None, priority=0, catch_up=1, enabled=True):
    """Create schedule ``name`` or update it as the code declares it (``atp.schedule``);
    return the ``Schedule``.

    The declaration writes every field but ``enabled`` once an operator set that
    (``switched_by_operator``): the operator's choice stands. While Django starts (an
    app's ``tasks`` module, imported before any table may exist) nothing touches the
    database: the schedule is checked as far as it can be without it, recorded, and
    written by ``sync_declared_schedules``; None is returned then. Raise as
    ``clean_schedule``; nothing changes then.
    """
    arguments = {"cron": cron, "every": every, "timezone": timezone, "inputs": inputs,
                 "priority": priority, "catch_up": catch_up, "enabled": enabled}
    if not apps.ready:
        check_schedule(name, **arguments)
        if not isinstance(type_identifier, Type):
            registry.clean_type_identifier(type_identifier)
        schedules.declare(name, {"type_identifier": type_identifier, **arguments})
        return None
    fields, timetable = clean_schedule(name, type_identifier, **arguments)
    return _save(fields, timetable, by_operator=False)


def save_schedule(name, type_identifier, *, cron=None, every=None, timezone=None, inputs=None,
                  priority=0, catch_up=1, enabled=True):
    """Create schedule ``name`` or replace it as an operator does (the admin's form);
    return the ``Schedule``. Once an operator set ``enabled`` (a new schedule, or a
    change), declarations in code no longer change it. Raise as ``clean_schedule``."""
    fields, timetable = clean_schedule(
        name, type_identifier, cron=cron, every=every, timezone=timezone, inputs=inputs,
        priority=priority, catch_up=catch_up, enabled=enabled)
    return _save(fields, timetable, by_operator=True)


def sync_declared_schedules():
    """Write the schedules declared while Django started, as ``declare_schedule`` does;
    return them. One the database refuses (its type unknown, its inputs too large for
    it) is left out, with an error in the log: the others are written all the same."""
    saved = []
    for name, arguments in schedules.declarations().items():
        try:
            saved.append(declare_schedule(name, **arguments))
        except AtpError as exc:
            logger.error("schedule %s, declared in code, is not saved: %s", name, exc)
    return saved


def check_schedule(name, *, cron=None, every=None, timezone=None, inputs=None, priority=0,
                   catch_up=1, enabled=True):
    """Return a schedule's fields as stored but its type, and its ``Timetable``, checked
    as far as they can be without the database. Raise ``InvalidParameter`` or
    ``InputsNotSerializable``."""
    name = schedules.clean_name(name)
    timetable = schedules.Timetable.clean(cron, every, timezone)
    if isinstance(priority, bool) or not isinstance(priority, int) or not (
            PRIORITY_MIN <= priority <= PRIORITY_MAX):
        raise InvalidParameter(
            f"priority must be an integer from {PRIORITY_MIN} to {PRIORITY_MAX}, not {priority!r}")
    if not isinstance(enabled, bool):
        raise InvalidParameter(f"enabled must be True or False, not {enabled!r}")
    fields = {
        "name": name, "cron": timetable.cron, "interval": timetable.interval,
        "timezone": timetable.timezone, "inputs": dump_json(inputs), "priority": priority,
        "catch_up": schedules.clean_catch_up(catch_up), "enabled": enabled,
    }
    return fields, timetable


def clean_schedule(name, type_identifier, *, cron=None, every=None, timezone=None, inputs=None,
                   priority=0, catch_up=1, enabled=True):
    """Return a schedule's fields as stored, and its ``Timetable``, checked.

    Raise ``InvalidParameter``, ``TaskTypeNotFound``, ``InputsNotSerializable`` or
    ``InputsTooLarge``.
    """
    fields, timetable = check_schedule(name, cron=cron, every=every, timezone=timezone,
                                       inputs=inputs, priority=priority, catch_up=catch_up,
                                       enabled=enabled)
    task_type = get_type(type_identifier)
    check_inputs(inputs, task_type)  # as enqueue will check them at each run
    return {**fields, "type": task_type}, timetable


@queue_write
def _save(fields, timetable, by_operator):
    now = database_now(database())
    current = for_update(Schedule.objects.filter(name=fields["name"])).first()
    if by_operator and (current is None or current.enabled != fields["enabled"]):
        fields = {**fields, "switched_by_operator": True}
    elif not by_operator and current is not None and current.switched_by_operator:
        fields = {**fields, "enabled": current.enabled}  # the operator's choice stands
    # Saved again as it was (a deploy that declares its schedules), it keeps its due time.
    # A new timetable, or enabling it, starts it afresh: no catching up on the time it
    # did not have or was off.
    is_fresh = (current is None or current.timetable != timetable
                or (fields["enabled"] and not current.enabled))
    next_run = timetable.first_after(now) if is_fresh else current.next_run
    schedule, _ = Schedule.objects.update_or_create(
        name=fields["name"], defaults={**fields, "next_run": next_run})
    return schedule


@queue_write
def delete_schedule(name):
    """Delete schedule ``name``; its tasks already queued stay. Raise ``ScheduleNotFound``."""
    deleted, _ = Schedule.objects.filter(name=schedules.clean_name(name)).delete()
    if not deleted:
        raise ScheduleNotFound(f"no schedule is named {name!r}")


@queue_write
def set_schedule_enabled(name, enabled):
    """Enable or disable schedule ``name`` as an operator does; return it. Enabled again,
    it starts afresh from now (the due times while it was off are not caught up). From
    then on declarations in code leave ``enabled`` as the operator set it. Raise
    ``ScheduleNotFound``."""
    schedule = for_update(Schedule.objects.filter(name=schedules.clean_name(name))).first()
    if schedule is None:
        raise ScheduleNotFound(f"no schedule is named {name!r}")
    if enabled and not schedule.enabled:
        schedule.next_run = schedule.timetable.first_after(database_now(database()))
    schedule.enabled, schedule.switched_by_operator = enabled, True
    schedule.save(update_fields=["enabled", "switched_by_operator", "next_run", "updated"])
    return schedule


def seconds_to_next_run():
    """Return the seconds until the first enabled schedule comes due, on the database
    clock (0 or less: due now), or None when no schedule is enabled. One indexed query."""
    row = (Schedule.objects.filter(enabled=True).order_by("next_run").annotate(now=Now())
           .values_list("next_run", "now").first())
    return None if row is None else (row[0] - row[1]).total_seconds()


def enqueue_due(now=None):
    """Enqueue the due runs of every enabled schedule, each schedule in a transaction of
    its own; return the tasks enqueued. ``now`` (an aware datetime) replaces the
    database's clock."""
    moment = database_now(database()) if now is None else now
    due = (Schedule.objects.filter(enabled=True, next_run__lte=moment).order_by("next_run")
           .values_list("pk", flat=True))
    enqueued = []
    for pk in list(due):
        enqueued += _enqueue_runs(pk, now)
    return enqueued


@queue_write
def _enqueue_runs(pk, now):
    moment = database_now(database()) if now is None else now
    rows = Schedule.objects.filter(pk=pk, enabled=True, next_run__lte=moment)
    if connections[database()].features.has_select_for_update_skip_locked:
        rows = rows.select_for_update(skip_locked=True)  # another daemon enqueues it
    schedule = rows.first()
    if schedule is None:
        return []  # done meanwhile, or being done, by another daemon; or changed
    grace = datetime.timedelta(seconds=conf.SCHEDULE_GRACE_SECONDS)
    try:
        plan = schedules.plan(schedule.timetable, schedule.next_run, moment, schedule.catch_up,
                              grace)
        inputs = load_json(schedule.inputs)
    except (InvalidParameter, ValueError) as exc:
        # Only a row written around atp's checks gets here: stop it rather than fail
        # at every poll of every daemon.
        logger.error("schedule %s disabled: %s", schedule.name, exc)
        Schedule.objects.filter(pk=pk).update(enabled=False)
        return []
    task_type = Type.objects.get(pk=schedule.type_id)
    enqueued, last_run = [], schedule.last_run
    for due in plan.runs:
        skipped = plan.skipped if due == plan.runs[0] else None
        instance, is_done = _enqueue_run(schedule, task_type, inputs, due, skipped)
        if instance is not None:
            enqueued.append(instance)
        if is_done:
            last_run = due
    if plan.skipped is not None and not plan.runs:
        logger.warning("schedule %s: due times from %s to %s skipped (catch_up %s)",
                       schedule.name, *map(_when, plan.skipped), schedule.catch_up)
    Schedule.objects.filter(pk=pk).update(next_run=plan.next_run, last_run=last_run)
    return enqueued


def _enqueue_run(schedule, task_type, inputs, due, skipped):
    """Enqueue the run of ``schedule`` due at ``due``; return its task (None when none was
    enqueued) and whether the run is done (enqueued now or before)."""
    identifier = schedules.run_identifier(schedule.name, due)
    try:
        instance = enqueue(task_type, inputs, identifier=identifier, priority=schedule.priority)
    except TaskAlreadyExists:
        logger.info("schedule %s: task %s is already queued", schedule.name, identifier)
        return None, True
    except AtpError as exc:  # a full queue, inputs the type no longer takes
        logger.warning("schedule %s: the run due at %s is skipped: %s", schedule.name,
                       _when(due), exc)
        return None, False
    message = f"enqueued by schedule {schedule.name}, for its run due at {_when(due)}"
    if skipped is not None:
        message += (f"; the due times from {_when(skipped[0])} to {_when(skipped[1])} passed "
                    f"while no daemon ran and are skipped (catch_up {schedule.catch_up})")
    write_history(instance.pk, None, 0, message)
    return instance, True


def _when(moment):
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
