"""A task type's queue depth limit (max_queued)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('atp', '0008_retry_policy'),
    ]

    operations = [
        migrations.AddField(
            model_name='type',
            name='max_queued',
            field=models.PositiveIntegerField(blank=True, help_text='At most this many tasks of the type in the queue (waiting or running); enqueue raises QueueFull beyond it. Empty for no limit.', null=True),
        ),
    ]
