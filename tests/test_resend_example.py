"""The message-resend pattern of docs/queue-features.md: a message is re-sent with a
named task and a countdown until it is acknowledged, at most 5 times, never two sends
at once. Time is controlled: a queued send's countdown is moved into the past instead
of waited for."""

import pytest
from django.utils import timezone

import atp
from atp.daemon.execution import run_task
from atp.models import Instance, LogRecord, Task
from atp.states import LIVE, Status
from tests import handlers
from tests.factories import claim_exactly

pytestmark = pytest.mark.django_db


@pytest.fixture
def resend_type(db):
    handlers.MESSAGES.clear()
    # No restart: a send whose worker died after delivering is not delivered again.
    return atp.register_task_type("tests.resend", "tests.handlers.resend", max_restarts=0)


def sends_of(message_id):
    return Instance.objects.filter(identifier__startswith=f"resend-{message_id}-")


def run_next(daemon, message_id):
    """Run the queued send of the message as a daemon would once it is due; return it."""
    live = list(sends_of(message_id).filter(status__in=LIVE))
    assert len(live) <= 1, "two sends of one message at once"
    if not live:
        return None
    [task] = live
    Task.objects.filter(pk=task.pk).update(not_before=timezone.now())  # its countdown is over
    claimed = claim_exactly(task, daemon)
    run_task(claimed.pk, claimed.attempt, claimed.type.handler, daemon)
    return Instance.objects.get(pk=task.pk)


def test_an_unacknowledged_message_is_sent_five_times_one_after_the_other(resend_type, daemon):
    handlers.MESSAGES[7] = {"acknowledged": False, "sends": []}
    handlers.start_sending(7, every=60)
    handlers.start_sending(7, every=60)  # a second click: the first send is queued already
    assert sends_of(7).count() == 1
    ran = []
    while (task := run_next(daemon, 7)) is not None:
        ran.append(task)
        assert task.status == Status.FINISHED
    assert handlers.MESSAGES[7]["sends"] == [1, 2, 3, 4, 5]
    assert [task.identifier for task in ran] == [f"resend-7-{n}" for n in range(1, 6)]
    for earlier, later in zip(ran, ran[1:], strict=False):  # in the order of the history
        started = LogRecord.objects.get(instance=earlier, status=Status.RUNNING).pk
        queued = LogRecord.objects.get(instance=later, status=Status.ACCEPTED).pk
        assert started < queued, "a send was queued before the one before ran"


def test_an_acknowledged_message_is_sent_no_more(resend_type, daemon):
    handlers.MESSAGES[8] = {"acknowledged": False, "sends": []}
    handlers.start_sending(8, every=60)
    run_next(daemon, 8)
    run_next(daemon, 8)
    handlers.MESSAGES[8]["acknowledged"] = True
    last = run_next(daemon, 8)
    assert atp.get_response(last).text == "acknowledged"
    assert run_next(daemon, 8) is None
    assert handlers.MESSAGES[8]["sends"] == [1, 2]


def test_the_next_send_waits_its_countdown(resend_type, daemon):
    handlers.MESSAGES[9] = {"acknowledged": False, "sends": []}
    handlers.start_sending(9, every=60)
    run_next(daemon, 9)
    waiting = Task.objects.get(identifier="resend-9-2")
    assert 59 <= (waiting.not_before - waiting.enqueued).total_seconds() <= 61
    assert atp.dequeue(daemon) == []  # not before its time


def test_a_send_restarted_within_its_window_is_not_queued_twice(resend_type, daemon):
    handlers.MESSAGES[10] = {"acknowledged": False, "sends": []}
    handlers.start_sending(10, every=60)
    run_next(daemon, 10)
    handlers.queue_send(10, 2, 60, countdown=60)  # a step run again would queue it again
    handlers.start_sending(10, every=60)  # and the first send, ended, stays taken (9 days)
    assert sorted(sends_of(10).values_list("identifier", flat=True)) == [
        "resend-10-1", "resend-10-2"]
