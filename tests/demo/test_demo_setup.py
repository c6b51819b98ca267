import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from atp.models import Instance, Type
from atp.states import Status

pytestmark = pytest.mark.django_db


def run(*args):
    out = StringIO()
    call_command("demo_setup", *args, stdout=out)
    return out.getvalue()


def test_demo_setup_prints_a_login_that_works_and_queues_demo_work(client):
    output = run("--tasks", "7")
    username, password = re.search(r"as '(\w+)' with password '([^']+)'", output).groups()
    assert client.login(username=username, password=password)
    assert client.get("/admin/atp/instance/").status_code == 200
    assert {"demo.sleep", "demo.primes", "demo.render", "demo.fail"} <= set(
        Type.objects.filter(identifier__startswith="demo.").values_list("identifier", flat=True))
    assert Instance.objects.filter(type__identifier__startswith="demo.", status=Status.ACCEPTED).count() == 7


def test_running_it_again_resets_the_password_and_adds_work(client):
    first = re.search(r"password '([^']+)'", run("--tasks", "1")).group(1)
    second = re.search(r"password '([^']+)'", run("--tasks", "1")).group(1)
    assert first != second
    assert not client.login(username="demo", password=first)
    assert client.login(username="demo", password=second)
    assert Instance.objects.count() == 2


def test_a_negative_count_is_refused():
    with pytest.raises(CommandError, match="--tasks must be 0 or more"):
        run("--tasks", "-1")
