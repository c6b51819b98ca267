"""Aggressive autovacuum for the queue table on PostgreSQL (see docs/performance.md).

Every task inserts, updates and deletes its queue row: the table churns through its
whole content while staying small, and PostgreSQL's defaults (vacuum and analyze after
20 % and 10 % of the rows changed) leave it bloated and its statistics stale after a
burst. Other databases have no such settings.
"""

from django.db import migrations

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
    if schema_editor.connection.vendor == "postgresql":
        options = ", ".join(f"{name} = {value}" for name, value in QUEUE_TABLE_STORAGE.items())
        schema_editor.execute(f"ALTER TABLE atp_task SET ({options})")


def reset_storage(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE atp_task RESET ({', '.join(QUEUE_TABLE_STORAGE)})")


class Migration(migrations.Migration):

    dependencies = [
        ("atp", "0005_logrecord_actor"),
    ]

    operations = [
        migrations.RunPython(set_storage, reset_storage, elidable=False),
    ]
