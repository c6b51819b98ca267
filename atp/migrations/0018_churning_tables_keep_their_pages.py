"""The tables every task goes through keep their empty pages through vacuums (PostgreSQL).

Every task inserts and deletes its queue row, and retention deletes what it wrote in
the task, inputs, response and history tables: their last pages are often empty when
a vacuum ends, and a vacuum then truncates them. That takes the table's ACCESS
EXCLUSIVE lock, which stops every enqueue, claim and end until it is over. Under a
steady stream on a stock server, autovacuum did it once a minute to the queue table
and now and then to the task table, and each time the wait for a start went from
~10 ms to half a second and more (docs/performance.md, "A steady stream"). The pages
are reused by the next rows anyway; ``VACUUM (TRUNCATE true)`` still gives them back
on demand. Other databases have no such setting.
"""

from django.db import migrations

from atp.engine.databases import database_of

#: Written and purged by every task: the queue, the task, its inputs, response, history.
CHURNING_TABLES = ("atp_task", "atp_instance", "atp_inputs", "atp_response", "atp_logrecord")


def keep_pages(apps, schema_editor):
    database = database_of(schema_editor.connection)
    for table in CHURNING_TABLES:
        database.set_table_storage(schema_editor, table, {"vacuum_truncate": "false"})


def let_go_of_pages(apps, schema_editor):
    database = database_of(schema_editor.connection)
    for table in CHURNING_TABLES:
        database.reset_table_storage(schema_editor, table, ["vacuum_truncate"])


class Migration(migrations.Migration):

    dependencies = [
        ("atp", "0017_batch_owner_pulse"),
    ]

    operations = [
        migrations.RunPython(keep_pages, let_go_of_pages, elidable=False),
    ]
