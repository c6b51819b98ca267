"""The retry policy of task types (atp/retry.py) and each task's count of retries."""

import datetime
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('atp', '0007_task_type_lease_index'),
    ]

    operations = [
        migrations.AddField(
            model_name='instance',
            name='retries',
            field=models.PositiveIntegerField(default=0, help_text="How often a failed attempt was retried (the type's retry policy)."),
        ),
        migrations.AddField(
            model_name='type',
            name='age_limit',
            field=models.DurationField(blank=True, help_text='Retry a failed task until it first ran this long ago; with retry_limit, until both are reached.', null=True),
        ),
        migrations.AddField(
            model_name='type',
            name='max_backoff',
            field=models.DurationField(default=datetime.timedelta(seconds=3600), help_text='The longest wait between retries.'),
        ),
        migrations.AddField(
            model_name='type',
            name='max_doublings',
            field=models.PositiveSmallIntegerField(default=16, help_text='The wait doubles this many times, then grows linearly.'),
        ),
        migrations.AddField(
            model_name='type',
            name='min_backoff',
            field=models.DurationField(default=datetime.timedelta(microseconds=100000), help_text='The wait before the first retry.'),
        ),
        migrations.AddField(
            model_name='type',
            name='retry_jitter',
            field=models.BooleanField(default=False, help_text='Draw each wait between half of it and all of it.'),
        ),
        migrations.AddField(
            model_name='type',
            name='retry_limit',
            field=models.PositiveIntegerField(blank=True, help_text='Retry a failed task this many times; empty: age_limit alone decides.', null=True),
        ),
    ]
