"""Imported by atp at start-up, before any table may exist (``manage.py migrate`` on a
fresh database): the schedule is recorded, and written once the tables are there."""

import atp


@atp.task_type("declaring.report")
def report(task, inputs):
    return inputs


atp.schedule("nightly-report", "declaring.report", cron="30 2 * * *", inputs={"report": "daily"})
