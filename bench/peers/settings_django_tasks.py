"""django-tasks-db's project in ``make bench-peers``: Django's Tasks API (the django-tasks
backport on Django 5.2) with django-tasks-db's backend at its defaults."""

from bench.peers import base

SECRET_KEY = "django-atp-bench-peers"
USE_TZ = True
DEBUG = False
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_tasks",
                  "django_tasks_db"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = base.django_databases(base.postgres_url("django-tasks-db"))
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
LOGGING = {"version": 1, "loggers": {"django_tasks": {"level": "WARNING"},
                                     "django_tasks_db": {"level": "WARNING"}}}
