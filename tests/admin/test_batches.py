import re

import pytest

import atp
from atp import engine
from atp.engine.batches import complete_due
from atp.states import Status
from tests.factories import drive

pytestmark = pytest.mark.django_db


@pytest.fixture
def batch(noop_type):
    atp.register_task_type("tests.done", "tests.handlers.noop")
    with atp.batch("tests.done", name="nightly") as made:
        tasks = atp.enqueue_many("tests.noop", [{}] * 4)
    drive(tasks[0], Status.FINISHED)
    drive(tasks[1], Status.FAILED)
    engine.cancel(tasks[2])
    made.tasks = tasks
    return made


def test_the_batch_list_shows_progress_and_failures(log_in, batch):
    admin = log_in("superuser")
    page = admin.get("/admin/atp/batch/").content.decode()
    row = re.search(r"batch #\d+ nightly.*?</tr>", page, re.S).group(0)
    assert 'value="75"></progress> 3 / 4' in row
    assert '<td class="field-failed_members">1, 1</td>' in row
    assert "add" not in page.split("object-tools")[-1][:300]


def test_a_completed_batch_links_its_on_complete_task(log_in, batch):
    drive(batch.tasks[3], Status.FINISHED)
    complete_due()
    batch.refresh_from_db()
    admin = log_in("superuser")
    page = admin.get(f"/admin/atp/batch/{batch.pk}/change/").content.decode()
    assert f'/admin/atp/instance/{batch.completion_id}/change/">#{batch.completion_id}</a>' in page
    assert admin.post(f"/admin/atp/batch/{batch.pk}/change/", {"name": "x"}).status_code == 403


def test_the_task_page_shows_its_batch(log_in, batch):
    staff = log_in("can change")
    page = staff.get(f"/atp/tasks/{batch.tasks[3].pk}/").content.decode()
    assert re.search(r"batch #\d+ nightly: 3 of 4 ended \(1 failed, 1 cancelled\)", page)
    member = log_in("superuser").get(f"/admin/atp/instance/{batch.tasks[3].pk}/change/")
    assert re.search(r"batch #\d+ nightly", member.content.decode())


@pytest.mark.parametrize("codenames, sees", [
    (["view_batch"], False),
    (["view_batch", "view_inputs"], True),
])
def test_seeing_a_batchs_inputs_needs_what_seeing_a_tasks_needs(client, django_user_model,
                                                                noop_type, codenames, sees):
    from tests import handlers
    from tests.admin.test_schedules import staff_with

    with atp.batch(handlers.multiply, inputs={"token": "s3cr3t"}) as made:
        atp.enqueue("tests.noop", {})
    viewer = staff_with(client, django_user_model, *codenames)
    page = viewer.get(f"/admin/atp/batch/{made.pk}/change/")
    assert page.status_code == 200
    assert ("s3cr3t" in page.content.decode()) == sees
    assert ("tests.handlers.multiply" in page.content.decode()) == sees
    for lookup in ("inputs__contains=s3cr3t", "function__startswith=tests"):
        assert viewer.get(f"/admin/atp/batch/?{lookup}").status_code == 400


def test_an_open_batch_says_so_and_counts_what_is_known(log_in, noop_type):
    with atp.batch("tests.noop", name="open") as made:
        tasks = atp.enqueue_many("tests.noop", [{}] * 3)
    drive(tasks[0], Status.FAILED)
    admin = log_in("superuser")
    page = admin.get(f"/admin/atp/batch/{made.pk}/change/").content.decode()
    assert "1 / 3 (open)" in page
    assert "3 so far (open: counted when it completes)" in page  # total
    assert "1 so far" in page and "0 so far" in page  # failed; finished, cancelled


def test_a_batchs_times_are_shown_to_the_second_with_their_zone(log_in, batch):
    page = log_in("superuser").get("/admin/atp/batch/").content.decode()
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", page)
    assert " p.m." not in page and " a.m." not in page
