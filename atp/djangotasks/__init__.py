"""atp behind Django's Tasks framework (``django.tasks`` on Django 6, the ``django_tasks``
backport before it): ``atp.backends.ATPBackend`` and what it stands on.

Nothing here is imported unless ``TASKS`` names the backend (``atp.apps`` looks at the
setting without importing it). See docs/django-tasks.md.
"""
