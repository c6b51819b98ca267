import importlib
import sys
import uuid

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


class HandlerModule:
    """A handler module a test writes, and rewrites, while daemons run (as a developer
    edits a ``tasks.py``): importable in the test and in the daemons it starts."""

    def __init__(self, directory):
        self.directory = directory
        self.name = f"handlers_{uuid.uuid4().hex[:8]}"

    def __call__(self, source, *, load=True):
        """Write ``source`` as the module and, with ``load``, (re)load it here; return its name."""
        (self.directory / f"{self.name}.py").write_text(source)
        importlib.invalidate_caches()
        if not load:
            return self.name
        if self.name in sys.modules:
            importlib.reload(sys.modules[self.name])
        else:
            importlib.import_module(self.name)
        return self.name

    def daemon_settings(self):
        """Return the environment of a daemon that runs the module's handlers."""
        return {"PYTHONPATH": str(self.directory), "PYTHONDONTWRITEBYTECODE": "1",
                "ATP_TEST_MORE_HANDLER_MODULES": self.name}


@pytest.fixture
def handler_module(tmp_path, settings, monkeypatch):
    """Return a ``HandlerModule`` in a directory on the path, listed in ATP_HANDLER_MODULES."""
    module = HandlerModule(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    settings.ATP_HANDLER_MODULES = [*settings.ATP_HANDLER_MODULES, module.name]
    yield module
    sys.modules.pop(module.name, None)
