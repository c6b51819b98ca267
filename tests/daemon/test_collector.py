"""How atpd's processes set Python's cyclic garbage collector (``atp.daemon.collector``)."""

import gc

import pytest

import atp
from atp.daemon import collector
from atp.models import Instance
from atp.states import Status
from tests.processes import wait_until


@pytest.fixture
def restored_collector():
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_the_supervisor_freezes_what_it_started_with_and_collects_less_often(restored_collector):
    gc.unfreeze()
    started_with = object()  # noqa: F841 -- alive at start-up, as the daemon's modules are
    collector.for_supervisor()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (collector.SUPERVISOR_ALLOCATIONS, *collector.DEFAULT_THRESHOLDS[1:])
    collector.for_worker()
    assert gc.get_threshold() == collector.DEFAULT_THRESHOLDS
    assert gc.get_freeze_count() > 0  # a worker keeps what its supervisor froze


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_collects_at_the_defaults_and_keeps_its_supervisors_start_up_frozen(start_daemon):
    atp.register_task_type("tests.collector", "tests.handlers.collector_state")
    task = atp.enqueue("tests.collector")
    daemon = start_daemon("--workers", 1)
    wait_until(lambda: Instance.objects.get(pk=task.pk).status == Status.FINISHED, timeout=30,
               message="task finished", output=daemon.output)
    state = atp.get_response(task).json()
    assert tuple(state["thresholds"]) == collector.DEFAULT_THRESHOLDS
    assert state["frozen"] > 0  # frozen by the supervisor before it forked the worker
