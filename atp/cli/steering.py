"""The subcommands that change tasks: ``enqueue``, ``reenqueue``, ``cancel``, ``run-again``,
``run-now``, ``retry`` and ``purge``, each through the queue verbs the admin uses, in the
operator's name.

An argument only the database can judge (an unknown type, a number that is no task's)
is checked before anything is changed; a task that refuses a verb is reported, and
the others are changed all the same, each in a transaction of its own.
"""

import os
import pwd
import socket

from django.db.models import Value
from django.db.models.functions import Now

from atp import bulk, engine
from atp.cli.report import Report, bad_argument, seconds
from atp.exceptions import (
    InputsNotSerializable,
    InputsTooLarge,
    InvalidParameter,
    InvalidTransition,
    QueueFull,
    TaskAlreadyExists,
    TaskNotFound,
    TaskTypeNotFound,
)
from atp.models import Instance
from atp.presentation import format_duration, refusal_reason
from atp.states import TERMINAL, Status

#: The states ``retry`` takes: those ``reenqueue`` puts back in the queue.
RETRIED_STATES = (Status.FAILED, Status.CANCELLED, Status.SCHEDULED, Status.RUNNING,
                  Status.PAUSED)


def actor():
    """Return how a task's history names whoever runs this command: the OS user (and
    who became it with sudo) on this host, through ``manage.py atp``."""
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:  # a uid with no name (a container's)
        user = f"uid {os.geteuid()}"
    name = f"{user}@{socket.gethostname()} via manage.py atp"
    sudo_user = os.environ.get("SUDO_USER")
    if sudo_user and sudo_user != user:
        name += f", sudo by {sudo_user}"
    return name


def task_type(identifier):
    """Return the ``Type`` named ``identifier``; raise a bad argument if none is registered."""
    try:
        return engine.get_type(identifier)
    except (TaskTypeNotFound, InvalidParameter) as exc:
        raise bad_argument(str(exc)) from exc


def enqueue(type_identifier, inputs, *, identifier=None, priority=0, countdown=None):
    """Queue a task through ``atp.enqueue``; report its id."""
    task_type(type_identifier)
    try:
        instance = engine.enqueue(type_identifier, inputs, identifier=identifier,
                                  priority=priority, countdown=countdown)
    except (InvalidParameter, InputsNotSerializable, InputsTooLarge, TaskTypeNotFound) as exc:
        raise bad_argument(str(exc)) from exc
    except (TaskAlreadyExists, QueueFull) as exc:
        document = {"id": None, "type": type_identifier, "identifier": identifier,
                    "status": None, "refused": str(exc)}
        return Report(document, problem=f"not enqueued: {exc}")
    document = {"id": instance.pk, "type": type_identifier, "identifier": instance.identifier,
                "status": str(instance.status), "refused": None}
    return Report(document, [str(instance.pk)])


#: The verbs ``steer`` applies, by subcommand: the queue verb, what its lines say was done,
#: and whether it queues a new task (``run-again``: the ended task stays as it is).
VERBS = {
    "reenqueue": (engine.reenqueue, "re-enqueued", False),
    "cancel": (engine.cancel, "cancelled", False),
    "run-again": (engine.run_again, "queued again", True),
    "run-now": (engine.run_now, "made runnable now", False),
}


def steer(verb_name, pks):
    """Apply the operator's verb ``verb_name`` to each task of ``pks``; report each."""
    verb, done_label, makes_new = VERBS[verb_name]
    pks = list(dict.fromkeys(pks))
    known = set(Instance.objects.filter(pk__in=pks).values_list("pk", flat=True))
    unknown = [pk for pk in pks if pk not in known]
    if unknown:
        raise bad_argument(f"no task #{', #'.join(map(str, unknown))}: nothing was changed")
    by = actor()
    refusals, new = {}, {}
    for pk in pks:
        try:
            result = verb(pk, by=by)
        except (InvalidTransition, TaskAlreadyExists, TaskNotFound) as exc:
            refusals[pk] = refusal_reason(exc)
        else:
            if makes_new:
                new[pk] = result.pk
    # The state each line tells is that of the task the verb left: the new one's for
    # run-again.
    states = dict(Instance.objects.filter(pk__in=[*pks, *new.values()])
                  .values_list("pk", "status"))
    tasks = [{"id": pk, "done": pk not in refusals, "status": _state(states.get(new.get(pk, pk))),
              "refused": refusals.get(pk), **({"new_id": new.get(pk)} if makes_new else {})}
             for pk in pks]
    lines = [f"#{t['id']} refused: {t['refused']}" if t["refused"] else
             f"#{t['id']} {done_label}{_as_new(t)} ({t['status']})" for t in tasks]
    document = {"tasks": tasks, "done": len(pks) - len(refusals), "refused": len(refusals)}
    problem = f"{len(refusals)} of {len(pks)} tasks refused" if refusals else ""
    return Report(document, lines, problem)


def _as_new(task):
    return f" as #{task['new_id']}" if task.get("new_id") else ""


def _state(status):
    return None if status is None else str(status)


def retry(type_identifier, state, since=None, *, dry_run=False):
    """Re-enqueue every task of a type in ``state`` (that got there within ``since``), in
    batches, as the admin's action does; with ``dry_run``, only count them."""
    tasks = Instance.objects.filter(type=task_type(type_identifier), status=state)
    if since is not None:
        # An ended task's end time is indexed with its type; others' last change will do.
        tasks = tasks.filter(**{f"{'finished' if state in TERMINAL else 'updated'}__gte":
                                Now() - Value(since)})
    document = {"type": type_identifier, "state": str(state), "since_seconds": seconds(since),
                "dry_run": dry_run}
    if dry_run:
        matched = tasks.count()
        document.update(matched=matched, reenqueued=0, refused={}, failed=0)
        return Report(document, [f"{matched} {state} tasks of {type_identifier} would be "
                                 "re-enqueued (dry run: nothing was changed)"])
    outcome = bulk.apply_to_each(tasks, engine.reenqueue, actor(), "re-enqueued")
    document.update(matched=outcome.done + sum(outcome.refused.values()) + outcome.failed,
                    reenqueued=outcome.done, refused=dict(outcome.refused), failed=outcome.failed)
    problem = "some tasks were not re-enqueued" if outcome.refused or outcome.failed else ""
    return Report(document, [outcome.message("re-enqueued")], problem)


def purge(type_identifier=None, older_than=None):
    """Delete ended tasks through ``atp.purge_finished``; report how many."""
    if type_identifier is not None:
        task_type(type_identifier)
    purged = engine.purge_finished(older_than=older_than, type=type_identifier)
    document = {"type": type_identifier, "older_than_seconds": seconds(older_than),
                "purged": purged}
    which = ("past their type's retention" if older_than is None
             else f"ended more than {format_duration(older_than)} ago" if older_than
             else "every ended task")
    return Report(document, [f"{purged} ended tasks purged ({which})"])
