"""``ATPBackend``: Django's Tasks framework in front, atp behind.

    TASKS = {"default": {"BACKEND": "atp.backends.ATPBackend",
                         "QUEUES": ["default", "emails"],
                         "OPTIONS": {"timeout": 600, "QUEUES": {"emails": {"max_concurrency": 2}}}}}

A task function's call is enqueued as an atp task of its queue's type
(``django.tasks/<alias>/<queue>``, see ``atp.djangotasks.config``), in the caller's
transaction like ``atp.enqueue``; ``atpd`` runs it (``atp.djangotasks.runner``) with
atp's time-outs, restarts, fencing, pause and history. Works with Django 6's
``django.tasks`` and with the ``django_tasks`` backport (``atp.djangotasks.compat``).
See docs/django-tasks.md.
"""

import atp
from atp.djangotasks import config, known, results
from atp.djangotasks.compat import (
    BaseTaskBackend,
    InvalidTask,
    TaskResult,
    TaskResultStatus,
    normalize_json,
    task_enqueued,
)
from atp.djangotasks.exceptions import InvalidArguments, refusals
from atp.exceptions import InvalidHandler


class ATPBackend(BaseTaskBackend):
    """Run ``@task`` functions with atpd."""

    supports_defer = True
    supports_priority = True
    supports_get_result = True
    supports_async_task = True

    def __init__(self, alias, params):
        super().__init__(alias, params)
        self.params = params

    def validate_task(self, task):
        """Validate as the framework does, and note the task for atpd (``known``).

        Where the function lives is checked at ``enqueue``, not here: ``@task`` runs while
        modules are imported, Django's start-up among them, which must never fail for it.
        """
        super().validate_task(task)
        known.note(task)

    def enqueue(self, task, args, kwargs):
        """Queue a call of ``task``; return its ``TaskResult`` (READY).

        Raise what the framework's backends raise, each also atp's own exception
        (``atp.djangotasks.exceptions``): ``InvalidArguments`` (a ``TypeError`` and a
        ``ValueError``) for arguments that are not JSON, ``ArgumentsTooLarge``,
        ``QueueFull``, ``InvalidTask`` (also for a function atpd would not run, see
        ``atp.djangotasks.known``); nothing is written then."""
        self.validate_task(task)
        try:
            found = known.find(task.module_path)
        except InvalidHandler as exc:
            raise InvalidTask(f"atpd would not run this task: {exc}; {known.HINT}.") from exc
        if found.func is not task.func:
            raise InvalidTask(f"atpd would not run this task: {task.module_path!r} is another "
                              "task function")
        try:
            args, kwargs = normalize_json(list(args)), normalize_json(dict(kwargs))
        except (TypeError, ValueError) as exc:
            raise InvalidArguments(f"Task arguments must be JSON: {exc}") from exc
        inputs = {"task": task.module_path, "args": args, "kwargs": kwargs,
                  "run_after": None if task.run_after is None else task.run_after.isoformat()}
        # (validate_task refused a naive run_after: atp runs with USE_TZ, atp.E011.)
        with refusals(self.alias):
            instance = atp.enqueue(config.type_identifier(self.alias, task.queue_name), inputs,
                                   priority=task.priority, eta=task.run_after)
        result = TaskResult(
            task=task, id=str(instance.pk), status=TaskResultStatus.READY,
            enqueued_at=instance.created, started_at=None, finished_at=None,
            last_attempted_at=None, args=args, kwargs=kwargs, backend=self.alias,
            errors=[], worker_ids=[],
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id):
        """Return the ``TaskResult`` of ``result_id`` as atp's rows say now; raise
        ``TaskResultDoesNotExist``."""
        return results.load(self.alias, result_id)
