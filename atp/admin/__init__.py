"""The Django admin of django-atp. Tasks change only through actions calling the queue verbs."""

from atp.admin import batches, instances, others, schedules, types  # noqa: F401 (registers the admins)
