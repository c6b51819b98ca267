"""django-q2's project in ``make bench-peers``: its ORM broker on PostgreSQL, every other
setting at django-q2's default; the cluster's worker count from ATP_PEERS_WORKERS."""

import os

from bench.peers import base

SECRET_KEY = "django-atp-bench-peers"
USE_TZ = True
DEBUG = False
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_q"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = base.django_databases(base.postgres_url("django-q2"))
Q_CLUSTER = {
    "name": "peers",
    "orm": "default",
    "workers": int(os.environ.get("ATP_PEERS_WORKERS", "1")),
    "log_level": "WARNING",  # as every system here: its log does not measure it
}
