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
from atp.djangotasks import config, results
from atp.djangotasks.exceptions import InvalidArguments, refusals
from atp.djangotasks.compat import (
    BaseTaskBackend,
    InvalidTask,
    TaskResult,
    TaskResultStatus,
    normalize_json,
    task_enqueued,
)
from atp.registry import is_allowed_module


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
        super().validate_task(task)
        if not task.module_path or "<" in task.module_path:
            raise InvalidTask("Task function must be importable by its module path.")
        if not is_allowed_module(task.func.__module__):
            raise InvalidTask(
                f"Task function must be in an installed app or ATP_HANDLER_MODULES "
                f"({task.func.__module__} is in neither): atpd runs only such code.")

    def enqueue(self, task, args, kwargs):
        """Queue a call of ``task``; return its ``TaskResult`` (READY).

        Raise what the framework's backends raise, each also atp's own exception
        (``atp.djangotasks.exceptions``): ``InvalidArguments`` (a ``TypeError`` and a
        ``ValueError``) for arguments that are not JSON, ``ArgumentsTooLarge``,
        ``QueueFull``, ``InvalidTask``; nothing is written then."""
        self.validate_task(task)
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
