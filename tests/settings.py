"""Settings for the test suite: SQLite by default, PostgreSQL with ATP_TEST_DATABASE_URL.

Tests that start other processes hand them ATP_TEST_DB_NAME, the name of the test
database, so that they connect to the same database as the test.
"""

import os
import tempfile

import dj_database_url

SECRET_KEY = "django-atp-tests"
USE_TZ = True
TIME_ZONE = "UTC"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_admin_listfilter_dropdown",
    "atp",
    "atp_demo",
    # Imports task functions of a package outside INSTALLED_APPS at start-up (Wagtail's way).
    "tests.importing_app",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

ATP_HANDLER_MODULES = ["tests.handlers", "tests.djangotasks"]
# Handler modules a test writes while daemons run (see tests/daemon/test_catalog.py).
if os.environ.get("ATP_TEST_MORE_HANDLER_MODULES"):
    ATP_HANDLER_MODULES += os.environ["ATP_TEST_MORE_HANDLER_MODULES"].split(",")

DATABASE_URL = os.environ.get("ATP_TEST_DATABASE_URL")
if DATABASE_URL:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0)}
else:
    # A file, not memory: tests start other processes that share the database.
    _sqlite_path = os.path.join(tempfile.gettempdir(), f"atp-tests-{os.getpid()}.sqlite3")
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": _sqlite_path,
            "OPTIONS": {"timeout": 20},
            "TEST": {"NAME": _sqlite_path},
        }
    }
    if os.environ.get("ATP_TEST_SQLITE_DJANGO_DEFAULTS"):
        # Django's own SQLite options (a 5 s busy timeout, deferred transactions), as a
        # project that set none runs with.
        del DATABASES["default"]["OPTIONS"]
if DATABASE_URL and DATABASE_URL.startswith("mysql"):
    # Every character, on every Django (4.2 connects in 3-byte "utf8": atp.W003).
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("charset", "utf8mb4")
if os.environ.get("ATP_TEST_DB_NAME"):
    DATABASES["default"]["NAME"] = os.environ["ATP_TEST_DB_NAME"]
# Sessions of a process a test started carry its name (see tests/pg_sessions.py).
if DATABASE_URL and DATABASE_URL.startswith("postgres") and os.environ.get(
        "ATP_TEST_APPLICATION_NAME"):
    DATABASES["default"].setdefault("OPTIONS", {})["application_name"] = (
        os.environ["ATP_TEST_APPLICATION_NAME"])

# Daemons started by tests run on short timers, which the tests set in their environment.
for _name in (
    "ATP_HEARTBEAT_INTERVAL_SECONDS", "ATP_DAEMON_TIMEOUT_SECONDS",
    "ATP_WORKER_KILL_GRACE_SECONDS", "ATP_POLL_INTERVAL_SECONDS",
    "ATP_SHUTDOWN_TIMEOUT_SECONDS", "ATP_PROGRESS_INTERVAL_SECONDS", "ATP_UNSEALED_BATCH_SECONDS",
):
    if _name in os.environ:
        globals()[_name] = float(os.environ[_name])
if "ATP_PURGE_BATCH_SIZE" in os.environ:
    ATP_PURGE_BATCH_SIZE = int(os.environ["ATP_PURGE_BATCH_SIZE"])
# A daemon started with ATP_TEST_SPANS_FILE traces with OpenTelemetry's SDK, into that
# file (tests/test_telemetry.py), as a project configures tracing in its settings.
if os.environ.get("ATP_TEST_SPANS_FILE"):
    from tests.tracing import export_spans_to

    export_spans_to(os.environ["ATP_TEST_SPANS_FILE"])
# ATP_TEST_ENGINE=orm runs the suite on the portable ORM engine (see atp.engine.engines).
ATP_ENGINE = os.environ.get("ATP_TEST_ENGINE", "auto")
if "ATP_PICKLE_ENABLED" in os.environ:
    ATP_PICKLE_ENABLED = os.environ["ATP_PICKLE_ENABLED"] == "1"
LOGIN_URL = "admin:login"

# Django's Tasks framework, run by atpd (tests/djangotasks): one backend, three queues.
TASKS = {
    "default": {
        "BACKEND": "atp.backends.ATPBackend",
        "QUEUES": ["default", "other", "brief"],
        "OPTIONS": {"timeout": 60, "QUEUES": {"brief": {"timeout": 3, "max_restarts": 0}}},
    },
}
# The suite runs on Django's default (deferred) SQLite transactions: an enqueue in an
# atomic() block must not need immediate ones (atp.W001, tested in tests/test_checks.py).
SILENCED_SYSTEM_CHECKS = ["atp.W001"]
