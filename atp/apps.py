from django.apps import AppConfig
from django.db import connections
from django.db.backends.signals import connection_created
from django.db.models.signals import post_migrate


class AtpConfig(AppConfig):
    name = "atp"
    verbose_name = "Asynchronous Task Processing"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from atp import (
            checks,  # noqa: F401 (registers the system checks)
            deferred,
            registry,
        )
        from atp.db import configure_connection

        connection_created.connect(configure_connection, dispatch_uid="atp.configure_connection")
        post_migrate.connect(sync_types_after_migrate, sender=self)
        registry.autodiscover()
        # The queues of TASKS backends that are atp's (read from the settings alone:
        # the Tasks framework is imported only when a task of theirs runs or is queued).
        from atp.djangotasks import config

        config.declare_types()
        deferred.declare()


def sync_types_after_migrate(sender, using, plan=None, **kwargs):
    """Write the ``@task_type`` and ``atp.schedule`` declarations once the tables exist
    (``post_migrate``)."""
    from atp import schedules
    from atp.engine.schedules import sync_declared_schedules
    from atp.engine.types import sync_declared_types
    from atp.models import Schedule, Type

    connection = connections[using]
    tables = connection.introspection.table_names()
    # Left for the migrate that brings the table, or its columns, back.
    if not _is_complete(connection, tables, Type):
        return
    sync_declared_types()
    if schedules.declarations() and _is_complete(connection, tables, Schedule):
        sync_declared_schedules()


def _is_complete(connection, tables, model):
    """Return whether ``model``'s table is there with all its columns (not so after a
    ``migrate`` to an earlier migration)."""
    if model._meta.db_table not in tables:
        return False
    with connection.cursor() as cursor:
        described = connection.introspection.get_table_description(cursor, model._meta.db_table)
    present = {column.name for column in described}
    return all(field.column in present for field in model._meta.concrete_fields)
