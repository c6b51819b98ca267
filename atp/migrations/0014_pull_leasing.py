"""Pull-style leasing: pull types, pull consumers, and the tag tasks are leased by."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('atp', '0013_batches'),
    ]

    operations = [
        migrations.AddField(
            model_name='daemon',
            name='consumer',
            field=models.CharField(blank=True, help_text='Set for a pull consumer (atp.lease_tasks): its name. It never heartbeats (its heartbeat is its first lease); its leases end at their deadline.', max_length=100),
        ),
        migrations.AddField(
            model_name='instance',
            name='tag',
            field=models.CharField(blank=True, help_text='What pull consumers lease related tasks together by (atp.lease_tasks).', max_length=500, null=True),
        ),
        migrations.AddField(
            model_name='task',
            name='tag',
            field=models.CharField(blank=True, max_length=500, null=True),
        ),
        migrations.AddField(
            model_name='type',
            name='pull',
            field=models.BooleanField(default=False, editable=False, help_text='A pull type: its tasks are leased by consumers outside atpd (atp.lease_tasks), never run by a daemon; it has no handler.'),
        ),
        migrations.AddIndex(
            model_name='task',
            index=models.Index(condition=models.Q(('daemon__isnull', True), ('tag__isnull', False)), fields=['type', 'tag', '-priority', 'not_before', 'instance'], name='atp_task_tag_idx'),
        ),
        migrations.AddConstraint(
            model_name='daemon',
            constraint=models.UniqueConstraint(condition=models.Q(('consumer', ''), _negated=True), fields=('consumer',), name='atp_daemon_consumer_uniq'),
        ),
    ]
