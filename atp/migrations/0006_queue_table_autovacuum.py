"""Aggressive autovacuum for the queue table on PostgreSQL (see docs/performance.md).

Every task inserts, updates and deletes its queue row: the table churns through its
whole content while staying small, and PostgreSQL's defaults (vacuum and analyze after
20 % and 10 % of the rows changed) leave it bloated and its statistics stale after a
burst. Other databases have no such settings.
"""

from django.db import migrations

from atp.engine.databases import database_of

#: Vacuum after 1,000 dead rows and analyze after 1,000 + 5 % changed rows, whatever
#: the table's size, and never throttle the vacuum of this small, hot table.
QUEUE_TABLE_STORAGE = {
    "autovacuum_vacuum_scale_factor": 0.0,
    "autovacuum_vacuum_threshold": 1000,
    "autovacuum_vacuum_insert_scale_factor": 0.0,
    "autovacuum_vacuum_insert_threshold": 1000,
    "autovacuum_analyze_scale_factor": 0.05,
    "autovacuum_analyze_threshold": 1000,
    "autovacuum_vacuum_cost_delay": 0,
}


def set_storage(apps, schema_editor):
    database_of(schema_editor.connection).set_table_storage(
        schema_editor, "atp_task", QUEUE_TABLE_STORAGE)


def reset_storage(apps, schema_editor):
    database_of(schema_editor.connection).reset_table_storage(
        schema_editor, "atp_task", list(QUEUE_TABLE_STORAGE))


class Migration(migrations.Migration):

    dependencies = [
        ("atp", "0005_logrecord_actor"),
    ]

    operations = [
        migrations.RunPython(set_storage, reset_storage, elidable=False),
    ]
