"""The admin of schedules: the checks of ``atp.schedule``, as form errors."""

import datetime

import pytest

import atp
from atp.models import Schedule
from tests.admin.test_instances import last_message

pytestmark = pytest.mark.django_db

ADD = "/admin/atp/schedule/add/"
LIST = "/admin/atp/schedule/"


def form(noop_type, **changes):
    return {"name": "beat", "type": noop_type.pk, "cron": "", "interval": "300",
            "timezone": "", "inputs": '{"n": 1}', "priority": "0", "catch_up": "1",
            "enabled": "on", **changes}


def test_a_schedule_added_in_the_admin_comes_due_like_one_from_the_api(log_in, noop_type):
    admin = log_in("superuser")
    response = admin.post(ADD, form(noop_type))
    assert response.status_code == 302
    schedule = Schedule.objects.get(name="beat")
    assert schedule.interval == datetime.timedelta(minutes=5) and schedule.inputs == '{"n":1}'
    assert schedule.next_run - schedule.created == pytest.approx(
        datetime.timedelta(minutes=5), abs=datetime.timedelta(seconds=2))
    page = admin.get(LIST).content.decode()
    assert "every 5 min" in page and "beat" in page


@pytest.mark.parametrize("changes, field, message", [
    ({"cron": "61 * * * *", "interval": ""}, "cron", "not a valid cron expression"),
    ({"cron": "* * * * *"}, None, "not both"),
    ({"interval": "0.5"}, "interval", "whole number of seconds"),
    ({"timezone": "Europe/Paris"}, "timezone", "applies to a cron expression"),
    ({"inputs": "{not json"}, "inputs", "not JSON"),
    ({"name": "no spaces"}, "name", "letters, digits"),
    ({"catch_up": "5000"}, "catch_up", "catch_up must be"),
])
def test_bad_input_is_a_form_error_and_saves_nothing(log_in, noop_type, changes, field, message):
    admin = log_in("superuser")
    response = admin.post(ADD, form(noop_type, **changes))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert message in " ".join(errors.get(field if field else "__all__", [])), errors
    assert not Schedule.objects.exists()


def test_changing_the_timetable_in_the_admin_recomputes_the_next_run(log_in, noop_type):
    admin = log_in("superuser")
    schedule = atp.schedule("beat", "tests.noop", every=3600)
    url = f"/admin/atp/schedule/{schedule.pk}/change/"
    page = admin.get(url).content.decode()
    assert 'name="name"' not in page  # a renamed schedule would be another one
    response = admin.post(url, form(noop_type, interval="", cron="0 0 1 1 *"))
    assert response.status_code == 302
    schedule.refresh_from_db()
    assert schedule.cron == "0 0 1 1 *" and schedule.interval is None
    assert (schedule.next_run.month, schedule.next_run.day) == (1, 1)


def test_schedules_are_disabled_and_enabled_by_actions(log_in, noop_type):
    admin = log_in("superuser")
    schedule = atp.schedule("beat", "tests.noop", every=60)
    response = admin.post(LIST, {"action": "disable_schedules", "_selected_action": [schedule.pk]})
    assert last_message(response) == "1 disabled"
    assert not Schedule.objects.get(pk=schedule.pk).enabled
    admin.post(LIST, {"action": "enable_schedules", "_selected_action": [schedule.pk]})
    assert Schedule.objects.get(pk=schedule.pk).enabled


def test_viewing_schedules_needs_their_permission(log_in, noop_type):
    atp.schedule("beat", "tests.noop", every=60)
    assert log_in("view only").get(LIST).status_code == 403
