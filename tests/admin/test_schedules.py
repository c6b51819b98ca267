"""The admin of schedules: the checks of ``atp.schedule``, as form errors."""

import datetime
import re

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


# -- who may write and see a schedule's inputs -------------------------------------------

CALL = '{"function": "tests.handlers.multiply", "args": [6, 7], "kwargs": {}}'


def staff_with(client, django_user_model, *codenames):
    """Log ``client`` in as a staff member holding exactly ``codenames`` of atp; return it."""
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user("-".join(codenames), password="pw",
                                                 is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="atp",
                                                        codename__in=codenames))
    assert user.get_all_permissions() == {f"atp.{codename}" for codename in codenames}
    client.force_login(user)
    return client


@pytest.fixture
def deferred_type(db):
    from atp.engine.types import get_type

    return get_type("atp.deferred")


def test_adding_a_schedule_does_not_let_one_write_its_inputs(client, django_user_model,
                                                             deferred_type):
    """A deferred call's inputs name a function: writing them is running code."""
    adder = staff_with(client, django_user_model, "add_schedule", "view_schedule")
    assert 'name="inputs"' not in adder.get(ADD).content.decode()
    response = adder.post(ADD, form(deferred_type, inputs=CALL))
    assert response.status_code == 302
    assert Schedule.objects.get(name="beat").inputs == "null"  # what was posted is ignored


def test_writing_inputs_needs_what_writing_a_tasks_inputs_needs(client, django_user_model,
                                                                deferred_type):
    writer = staff_with(client, django_user_model, "add_schedule", "view_schedule",
                        "change_inputs", "view_inputs")
    assert 'name="inputs"' in writer.get(ADD).content.decode()
    assert writer.post(ADD, form(deferred_type, inputs=CALL)).status_code == 302
    assert Schedule.objects.get(name="beat").inputs == CALL.replace(" ", "")


def test_changing_a_schedule_keeps_what_it_runs_unless_one_may_write_inputs(
        client, django_user_model, noop_type, deferred_type):
    schedule = atp.schedule("beat", "tests.noop", every=60, inputs={"token": "s3cr3t"})
    url = f"/admin/atp/schedule/{schedule.pk}/change/"
    changer = staff_with(client, django_user_model, "change_schedule", "view_schedule")
    page = changer.get(url).content.decode()
    assert "s3cr3t" not in page and 'name="inputs"' not in page and 'name="type"' not in page
    response = changer.post(url, form(deferred_type, inputs=CALL, interval="120"))
    assert response.status_code == 302
    schedule.refresh_from_db()
    # The timetable changed; what runs (the type's handler, given the inputs) did not.
    assert schedule.interval == datetime.timedelta(minutes=2)
    assert (schedule.type_id, schedule.inputs) == (noop_type.pk, '{"token":"s3cr3t"}')


@pytest.mark.parametrize("codenames, sees", [
    (["view_schedule"], False),
    (["view_schedule", "change_schedule"], False),
    (["view_schedule", "view_inputs"], True),
])
def test_seeing_a_schedules_inputs_needs_what_seeing_a_tasks_needs(
        client, django_user_model, noop_type, codenames, sees):
    schedule = atp.schedule("beat", "tests.noop", every=60, inputs={"token": "s3cr3t"})
    viewer = staff_with(client, django_user_model, *codenames)
    page = viewer.get(f"/admin/atp/schedule/{schedule.pk}/change/")
    assert page.status_code == 200
    assert ("s3cr3t" in page.content.decode()) == sees
    # Nor can a filter tell what they hold, row by row.
    assert viewer.get(f"{LIST}?inputs__contains=s3cr3t").status_code == 400


def test_inputs_one_may_not_write_that_no_longer_pass_are_a_form_error(
        client, django_user_model, noop_type):
    schedule = atp.schedule("beat", "tests.noop", every=60, inputs={"blob": "x" * 2000})
    atp.register_task_type("tests.noop", "tests.handlers.noop", max_input_bytes=1024)
    changer = staff_with(client, django_user_model, "change_schedule", "view_schedule")
    response = changer.post(f"/admin/atp/schedule/{schedule.pk}/change/",
                            form(noop_type, interval="120"))
    assert response.status_code == 200
    assert "at most 1,024 bytes" in " ".join(response.context["adminform"].form.non_field_errors())
    assert Schedule.objects.get(pk=schedule.pk).interval == datetime.timedelta(minutes=1)


def test_a_schedules_next_run_is_in_its_time_zone_said(log_in, noop_type):
    atp.schedule("paris", "tests.noop", cron="0 3 * * *", timezone="Europe/Paris")
    atp.schedule("hourly", "tests.noop", every=3600)
    page = log_in("superuser").get("/admin/atp/schedule/").content.decode()
    assert re.search(r"\d{4}-\d\d-\d\d 03:00:00 CES?T", page)
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", page)  # an interval's
