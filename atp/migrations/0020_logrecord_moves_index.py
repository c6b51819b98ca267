"""An index of the history by state and time: the charts count, minute by minute, the
entries that move tasks into and out of the queue in a window (``atp.trends.activity``)
without reading the rest of the history."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("atp", "0019_daemon_consumer_null_not_empty"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="logrecord",
            index=models.Index(fields=["status", "time", "attempt"], name="atp_logrecord_moves_idx"),
        ),
    ]
