"""Settings for the benchmarks: a database of their own, named by ATP_BENCH_DATABASE_URL
(a temporary SQLite file when unset)."""

import os

import dj_database_url
import django

SECRET_KEY = "django-atp-bench"
USE_TZ = True
DEBUG = False
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "atp"]
ATP_HANDLER_MODULES = ["bench.handlers"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {"default": dj_database_url.parse(os.environ["ATP_BENCH_DATABASE_URL"])}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    DATABASES["default"]["OPTIONS"] = {"timeout": 20}
    if django.VERSION >= (5, 1):  # as a project that follows atp.W001 runs
        DATABASES["default"]["OPTIONS"]["transaction_mode"] = "IMMEDIATE"
LOGGING = {"version": 1, "loggers": {"atp": {"level": "WARNING"}}}
