"""A batch over real daemons: its on-complete task comes exactly once, after the last
member ended, also when members are cancelled and re-enqueued meanwhile."""

import time

import pytest
from django.test import override_settings

import atp
from atp.models import Batch, Instance, LogRecord
from atp.serialization import load_json
from atp.states import Status
from tests.processes import start_module, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_batch_of_1000_over_three_daemons_completes_once(start_daemon, tmp_path):
    atp.register_task_type("tests.member", "tests.handlers.noop")
    atp.register_task_type("tests.last", "tests.handlers.wait_for_file")
    atp.register_task_type("tests.done", "tests.handlers.noop")
    gate = tmp_path / "gate"
    atp.pause_type("tests.member")  # so that 100 can be cancelled before they run
    with atp.batch("tests.done", inputs={"run": 1}) as batch:
        members = atp.enqueue_many("tests.member", [{}] * 999)
        last = atp.enqueue("tests.last", {"path": str(gate)})
    for task in members[:100]:
        atp.cancel(task)
    atp.resume_type("tests.member")
    # No prefetch: a task queued behind the last member, which runs until the gate
    # opens, would wait for it (docs/daemon.md), and the re-enqueued below may be so
    # queued in the moment before the daemon sees the last member runs long.
    daemons = [start_daemon("--workers", 2, "--prefetch", 0) for _ in range(3)]
    finished = Instance.objects.filter(type__identifier="tests.member", status=Status.FINISHED)
    wait_until(lambda: finished.count() == 899, timeout=120, message="899 members finished",
               output=daemons[0].output)
    for task in members[:50]:  # meanwhile (the last member still runs): 50 cancelled run
        atp.reenqueue(task)
    wait_until(lambda: finished.count() == 949, timeout=60, message="the 50 re-enqueued ran",
               output=daemons[0].output)
    assert not Instance.objects.filter(type__identifier="tests.done").exists()
    gate.touch()
    done = Instance.objects.filter(type__identifier="tests.done", status=Status.FINISHED)
    wait_until(done.exists, timeout=60, message="the on-complete task finished",
               output=daemons[0].output)
    wait_until(lambda: Instance.objects.filter(pk=last.pk, status=Status.FINISHED).exists(),
               timeout=10, message="the last member finished")
    time.sleep(1.5)  # more rounds of every daemon (each looks every poll): none completes it again
    for daemon in daemons:
        daemon.stop()
    [completion] = Instance.objects.filter(type__identifier="tests.done")
    assert load_json(completion.inputs.data) == {
        "batch": batch.pk, "name": "", "total": 1000, "finished": 950, "failed": 0,
        "cancelled": 50, "inputs": {"run": 1}}
    completed = Batch.objects.get(pk=batch.pk)
    assert completed.completion_id == completion.pk
    # It came after the last member ended.
    ended = LogRecord.objects.filter(instance=last, status=Status.FINISHED).get().time
    assert completion.created >= ended
    ran = set(LogRecord.objects.filter(status=Status.SCHEDULED).values_list("daemon", flat=True))
    assert len(ran) == 3, "not all three daemons took part"


def test_a_block_open_longer_than_the_unsealed_limit_keeps_its_batch_open(start_daemon):
    """An import that runs for longer than ``ATP_UNSEALED_BATCH_SECONDS`` while its members
    end: its batch stays open as long as its block runs, and completes once, with all."""
    atp.register_task_type("tests.member", "tests.handlers.noop")
    atp.register_task_type("tests.done", "tests.handlers.noop")
    limits = {"ATP_UNSEALED_BATCH_SECONDS": 1.5, "ATP_HEARTBEAT_INTERVAL_SECONDS": 0.2}
    daemon = start_daemon("--workers", 1, **limits)
    with override_settings(**limits), atp.batch("tests.done") as batch:
        first = atp.enqueue("tests.member")
        wait_until(lambda: Instance.objects.get(pk=first.pk).status == Status.FINISHED,
                   timeout=30, message="the first member finished", output=daemon.output)
        time.sleep(3)  # twice the limit, with the daemon's maintenance every 0.2 s
        assert Batch.objects.get(pk=batch.pk).sealed is None, daemon.output()
        atp.enqueue("tests.member")
    done = Instance.objects.filter(type__identifier="tests.done", status=Status.FINISHED)
    wait_until(done.exists, timeout=30, message="the on-complete task finished",
               output=daemon.output)
    [completion] = Instance.objects.filter(type__identifier="tests.done")
    assert load_json(completion.inputs.data)["total"] == 2
    assert "whose block never ended" not in daemon.output()


def test_the_batch_of_a_block_whose_process_died_is_sealed_and_completes(start_daemon, tmp_path):
    atp.register_task_type("tests.member", "tests.handlers.noop")
    atp.register_task_type("tests.done", "tests.handlers.noop")
    limits = {"ATP_UNSEALED_BATCH_SECONDS": 1.5, "ATP_HEARTBEAT_INTERVAL_SECONDS": 0.2}
    daemon = start_daemon("--workers", 1, **limits)
    owner = start_module("tests.batch_owner", tmp_path / "opened", extra_env={
        name: str(value) for name, value in limits.items()})
    wait_until((tmp_path / "opened").exists, timeout=30, message="the block opened")
    owner.kill()  # SIGKILL: its block never ends
    owner.wait()
    done = Instance.objects.filter(type__identifier="tests.done", status=Status.FINISHED)
    wait_until(done.exists, timeout=30, message="the on-complete task finished",
               output=daemon.output)
    [completion] = Instance.objects.filter(type__identifier="tests.done")
    assert load_json(completion.inputs.data)["total"] == 1
    assert "whose block never ended" in daemon.output()
