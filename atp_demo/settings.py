"""Settings of the django-atp demo project: the embedded SQLite database, the admin
and the ATP app, for trying django-atp on one machine. Not for production."""

import os
from pathlib import Path

import django

BASE_DIR = Path(__file__).resolve().parent.parent

# A development key: the demo only ever listens on 127.0.0.1.
SECRET_KEY = os.environ.get("ATP_DEMO_SECRET_KEY", "django-insecure-atp-demo-only")
DEBUG = os.environ.get("ATP_DEMO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

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
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "atp_demo.urls"
WSGI_APPLICATION = "atp_demo.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
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

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("ATP_DEMO_DATABASE", BASE_DIR / "db.sqlite3"),
        # Seconds a connection waits for SQLite's write lock before giving up.
        "OPTIONS": {"timeout": 20},
    }
}
if django.VERSION >= (5, 1):
    # Transactions that take the write lock when they begin: a block that reads and
    # then writes waits for a daemon's write rather than failing (atp.W001).
    DATABASES["default"]["OPTIONS"]["transaction_mode"] = "IMMEDIATE"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "admin:login"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"atp": {"handlers": ["console"], "level": "INFO"}},
}
