"""The Django admin of django-atp. Tasks change only through actions calling the queue verbs."""

from atp.admin import (  # noqa: F401 (registers the admins)
    batches,
    instances,
    others,
    schedules,
    semaphores,
    types,
)
