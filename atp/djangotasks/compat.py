"""The Tasks framework as this Django has it: built into Django 6 (``django.tasks``), or
the ``django_tasks`` backport on Django 4.2 to 5.2. Both have the same classes; some
names differ (``InvalidTask`` and ``InvalidTaskBackend`` end in ``Error`` in the backport)."""

from django.core.exceptions import ImproperlyConfigured

try:
    from django import tasks as framework
    from django.tasks import signals
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import (
        TASK_MAX_PRIORITY,
        TASK_MIN_PRIORITY,
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django.tasks.exceptions import (
        InvalidTask,
        InvalidTaskBackend,
        TaskException,
        TaskResultDoesNotExist,
    )

    BUILT_IN = True
except ImportError:
    try:
        import django_tasks as framework
        from django_tasks import signals
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import (
            TASK_MAX_PRIORITY,
            TASK_MIN_PRIORITY,
            Task,
            TaskContext,
            TaskError,
            TaskResult,
            TaskResultStatus,
        )
        from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskException, TaskResultDoesNotExist
    except ImportError as exc:
        raise ImproperlyConfigured(
            "atp.backends.ATPBackend needs Django's Tasks framework: Django 6 has it "
            "(django.tasks); on Django 4.2 to 5.2 install the backport "
            "(pip install 'django-atp[tasks]', or django-tasks)") from exc
    BUILT_IN = False

task_enqueued = signals.task_enqueued
task_started = signals.task_started
task_finished = signals.task_finished

try:
    from django.utils.json import normalize_json
except ImportError:  # Django before 6: the backport has it
    from django_tasks.utils import normalize_json

__all__ = [
    "BUILT_IN", "TASK_MAX_PRIORITY", "TASK_MIN_PRIORITY", "BaseTaskBackend", "InvalidTask",
    "InvalidTaskBackend", "Task", "TaskContext", "TaskError", "TaskException", "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus", "framework", "normalize_json", "task_enqueued", "task_finished",
    "task_started",
]
