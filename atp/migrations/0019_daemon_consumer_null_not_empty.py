"""A daemon's row has no consumer name (NULL), not an empty one: the consumers' names are
unique by a constraint with no condition, which every database enforces (MariaDB and
MySQL create none with a condition, so two first leases of one consumer could make two
rows of its name)."""

from django.db import migrations, models


def empty_to_null(apps, schema_editor):
    Daemon = apps.get_model("atp", "Daemon")
    Daemon.objects.using(schema_editor.connection.alias).filter(consumer="").update(consumer=None)


def null_to_empty(apps, schema_editor):
    Daemon = apps.get_model("atp", "Daemon")
    Daemon.objects.using(schema_editor.connection.alias).filter(
        consumer__isnull=True).update(consumer="")


class Migration(migrations.Migration):

    dependencies = [
        ('atp', '0018_churning_tables_keep_their_pages'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='daemon',
            name='atp_daemon_consumer_uniq',
        ),
        migrations.AlterField(
            model_name='daemon',
            name='consumer',
            field=models.CharField(blank=True, default=None, help_text='Set for a pull consumer (atp.lease_tasks): its name. It never heartbeats (its heartbeat is its first lease); its leases end at their deadline.', max_length=100, null=True),
        ),
        migrations.RunPython(empty_to_null, null_to_empty),
        migrations.AddConstraint(
            model_name='daemon',
            constraint=models.UniqueConstraint(fields=('consumer',), name='atp_daemon_consumer_uniq'),
        ),
    ]
