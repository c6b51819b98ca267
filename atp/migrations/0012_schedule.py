"""Periodic tasks: the Schedule model."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('atp', '0011_named_tasks'),
    ]

    operations = [
        migrations.CreateModel(
            name='Schedule',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(help_text="Letters, digits, '_' and '-'; names the tasks it enqueues.", max_length=100, unique=True)),
                ('cron', models.CharField(blank=True, help_text='A cron expression (5 fields, or 6 with seconds last); empty for an interval.', max_length=255)),
                ('interval', models.DurationField(blank=True, help_text='Every this long (whole seconds); empty for a cron expression.', null=True)),
                ('timezone', models.CharField(blank=True, help_text='The time zone of the cron expression, such as Europe/Paris; empty for UTC.', max_length=64)),
                ('inputs', models.TextField(default='null', help_text='The inputs of each task, as JSON.')),
                ('priority', models.SmallIntegerField(default=0)),
                ('catch_up', models.PositiveSmallIntegerField(default=1, help_text='After missed due times (no daemon ran), enqueue at most this many runs, the latest; 0: none more than ATP_SCHEDULE_GRACE_SECONDS late.')),
                ('enabled', models.BooleanField(default=True)),
                ('next_run', models.DateTimeField(db_index=True, help_text='The next due time not enqueued yet.')),
                ('last_run', models.DateTimeField(blank=True, help_text='The latest due time a task was enqueued for.', null=True)),
                ('created', models.DateTimeField(auto_now_add=True)),
                ('updated', models.DateTimeField(auto_now=True)),
                ('type', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='schedules', to='atp.type')),
            ],
            options={
                'ordering': ['name'],
            },
        ),
    ]
