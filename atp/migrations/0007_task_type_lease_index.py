"""An index of each type's leases: a claim counts them against the type's
``max_concurrency`` by key, however many of its tasks wait."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("atp", "0006_queue_table_autovacuum"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="task",
            index=models.Index(condition=models.Q(("daemon__isnull", False)), fields=["type"],
                               name="atp_task_type_lease_idx"),
        ),
    ]
