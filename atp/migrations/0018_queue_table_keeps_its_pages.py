"""The queue table keeps its empty pages through vacuums (PostgreSQL).

Every task inserts and deletes its queue row, so the table's last pages are often
empty when a vacuum ends, and a vacuum then truncates them: that takes the table's
ACCESS EXCLUSIVE lock, which stops every enqueue, claim and end until it is over.
Under a steady stream on a stock server, autovacuum did it every minute, and each time
the wait for a start went from ~10 ms to half a second and more (docs/performance.md,
"A steady stream"). The pages are reused by the next rows anyway. Other databases
have no such setting.
"""

from django.db import migrations


def keep_pages(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE atp_task SET (vacuum_truncate = false)")


def let_go_of_pages(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE atp_task RESET (vacuum_truncate)")


class Migration(migrations.Migration):

    dependencies = [
        ("atp", "0017_batch_owner_pulse"),
    ]

    operations = [
        migrations.RunPython(keep_pages, let_go_of_pages, elidable=False),
    ]
