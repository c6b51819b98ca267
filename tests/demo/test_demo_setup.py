import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

import atp
from atp.models import Instance, Schedule, Type
from atp.states import Status
from atp_demo import scenarios

pytestmark = pytest.mark.django_db


def run(*args):
    out = StringIO()
    call_command("demo_setup", *args, stdout=out)
    return out.getvalue()


def password_in(output):
    return re.search(r"as '(\w+)' with password '([^']+)'", output).groups()


def test_demo_setup_prints_a_login_that_works_and_registers_the_scenarios(client):
    username, password = password_in(run())
    assert client.login(username=username, password=password)
    assert client.get("/admin/atp/instance/").status_code == 200
    assert {"demo.quilt.square", "demo.quilt.done", "demo.fractal", "demo.flaky", "demo.hang",
            "demo.limited", "demo.tick"} <= set(
        Type.objects.filter(identifier__startswith="demo.").values_list("identifier", flat=True))
    assert Instance.objects.count() == 0  # the start page's buttons start the work


def test_assorted_tasks_are_queued_on_request():
    run("--tasks", "7")
    assert Instance.objects.filter(type__identifier__startswith="demo.",
                                   status=Status.ACCEPTED).count() == 7


def test_running_it_again_keeps_the_login_and_the_work(client):
    first = password_in(run())
    scenarios.start_flaky()
    output = run()
    assert password_in(output) == first
    assert "kept from the last run" in output
    assert client.login(username="demo", password=first[1])
    assert Instance.objects.count() == 1


def test_a_kept_password_changed_since_is_set_again(client, django_user_model):
    _, password = password_in(run())
    user = django_user_model.objects.get(username="demo")
    user.set_password("something else")
    user.save()
    assert password_in(run()) == ("demo", password)
    assert client.login(username="demo", password=password)


def test_a_reset_draws_a_new_password_and_removes_the_demos_work(client, noop_type):
    _, first = password_in(run())
    scenarios.start_quilt()
    scenarios.start_ticking()
    other = atp.enqueue("tests.noop")
    output = run("--reset")
    _, second = password_in(output)
    assert second != first
    assert not client.login(username="demo", password=first)
    assert client.login(username="demo", password=second)
    assert list(Instance.objects.all()) == [other]  # not the demo's: kept
    assert not Schedule.objects.exists()
    assert "64 demo tasks removed" in output


def test_a_negative_count_is_refused():
    with pytest.raises(CommandError, match="--tasks must be 0 or more"):
        run("--tasks", "-1")
