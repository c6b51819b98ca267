"""Schedules: whether one is enabled becomes the operator's once an operator set it."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('atp', '0014_pull_leasing'),
    ]

    operations = [
        migrations.AddField(
            model_name='schedule',
            name='switched_by_operator',
            field=models.BooleanField(default=False, help_text='An operator set whether it is enabled: a declaration in code no longer changes that.'),
        ),
    ]
