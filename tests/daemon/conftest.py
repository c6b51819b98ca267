import pytest

from atp import engine
from tests.factories import claim_exactly


@pytest.fixture
def claimed(daemon):
    """Claim a task for ``daemon`` as a supervisor would; return it."""
    return lambda instance: claim_exactly(instance, daemon)


@pytest.fixture
def poison_types(db):
    """Types whose handlers break their worker, each allowed one restart."""
    kinds = ["exit_3", "hard_exit_0", "abort", "segfault", "killed", "spin", "ignore_sigterm", "fail"]
    for kind in kinds:
        engine.register_task_type(f"tests.{kind}", f"tests.handlers.{kind}", max_restarts=1, timeout=1)
    return kinds
