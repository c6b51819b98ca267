import pytest
from django.db import connection

import atp
from atp import engine
from atp.models import Inputs, Instance, LogRecord, Response, Task


@pytest.fixture
def noop_type(db):
    return atp.register_task_type("tests.noop", "tests.handlers.noop")


@pytest.fixture
def pickle_enabled(settings):
    """Allow task types with pickled inputs (ATP_PICKLE_ENABLED, off by default)."""
    settings.ATP_PICKLE_ENABLED = True


@pytest.fixture
def daemon(db):
    return engine.register_daemon(workers=1)


@pytest.fixture
def row_counts():
    """Return a function counting the rows of every table a task writes."""

    def count():
        return {
            model.__name__: model.objects.count()
            for model in (Instance, Inputs, Task, LogRecord, Response)
        }

    return count


def pytest_addoption(parser):
    parser.addoption(
        "--once-elsewhere", action="store_true",
        help="leave out the tests marked `once`: what they test does not depend on the "
             "database or engine, and another stage of the stack runs them (make test)")


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--once-elsewhere"):
        return
    kept = [item for item in items if item.get_closest_marker("once") is None]
    config.hook.pytest_deselected(items=[item for item in items if item not in kept])
    items[:] = kept


def pytest_report_header(config):
    import django
    from django.conf import settings

    database = settings.DATABASES["default"]
    engine = database["ENGINE"].rsplit(".", 1)[-1]
    return f"Django {django.get_version()}, database: {engine} {database['NAME']}"


@pytest.fixture
def postgres_only():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set ATP_TEST_DATABASE_URL)")


#: Who may look at and change tasks, from nobody to everybody.
ROLES = {
    "anonymous": None,
    "staff without permissions": {"is_staff": True, "perms": []},
    "non-staff with permissions": {"is_staff": False, "perms": ["view_instance", "change_instance"]},
    "view only": {"is_staff": True, "perms": ["view_instance"]},
    "reads inputs and responses": {
        "is_staff": True, "perms": ["view_instance", "view_inputs", "view_response"],
    },
    "can change": {
        "is_staff": True,
        "perms": ["view_instance", "change_instance", "view_inputs", "view_response"],
    },
    "superuser": {"is_staff": True, "is_superuser": True, "perms": []},
}


@pytest.fixture
def log_in(client, django_user_model):
    """Log ``client`` in as one of ``ROLES``; return the client."""
    from django.contrib.auth.models import Permission

    def as_role(role, the_client=None):
        the_client = the_client or client
        spec = ROLES[role]
        if spec is None:
            return the_client
        user = django_user_model.objects.create_user(
            role.replace(" ", "-"), password="pw", is_staff=spec["is_staff"],
            is_superuser=spec.get("is_superuser", False),
        )
        user.user_permissions.set(Permission.objects.filter(
            content_type__app_label="atp", codename__in=spec["perms"]
        ))
        the_client.force_login(user)
        return the_client

    return as_role


@pytest.fixture
def start_daemon(tmp_path):
    """Start ``atpd`` processes; kill any still running at the end of the test."""
    from tests.processes import Daemon

    started = []

    def start(*args, **settings):
        daemon = Daemon(tmp_path, *args, **settings)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.stop()
