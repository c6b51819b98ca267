"""Which task functions atp runs, found by the module path a task's row names.

A Django task's row names its function by module path (``Task.module_path``). Workers
and ``get_result`` find it here, and take nothing but a ``Task`` (made by ``@task``)
bound at that very path, in a module that is either

- in an installed app or ``ATP_HANDLER_MODULES``, as atp's handlers are (imported if
  need be); or
- one where a task was made at that path while Django started: ``django.setup()``
  imports the apps, their models and runs their ``ready()`` (atp's own autodiscovery
  among them), and a project's app may import a library's tasks there (Wagtail's
  imports ``modelsearch.tasks``). ``note`` records each such task as the backend
  validates it; its module is loaded already, in every process of the project, atpd
  and its workers included, and nothing is imported for it.

A row naming anything else is refused before anything is imported: no row makes a
process import a module of its choice (importing runs its code), or run a function
that is not a task (``os.system``, a plain function of an app). A task made after
start-up outside those modules is refused at ``enqueue``: atpd would not have it.
"""

import importlib
import sys

from django.apps import apps

from atp.djangotasks.compat import Task
from atp.exceptions import InvalidHandler
from atp.registry import is_allowed_module

#: Module paths of the tasks made while Django started, in this process.
_made_at_start_up = set()

HINT = ("define it in an installed app, list its module in ATP_HANDLER_MODULES, or import "
        "its module while Django starts (from an installed app's models or its "
        "AppConfig.ready())")


def note(task):
    """Record a task the backend validated: one made while Django starts may run."""
    if not apps.ready:
        _made_at_start_up.add(task.module_path)


def find(path):
    """Return the ``Task`` at module path ``path``; raise ``InvalidHandler`` saying why
    atp does not run it. Only a module of an installed app or ``ATP_HANDLER_MODULES``
    is ever imported."""
    module_name, _, name = str(path).rpartition(".")
    module = sys.modules.get(module_name)
    if module_name and is_allowed_module(module_name):
        if module is None:
            try:
                module = importlib.import_module(module_name)
            except Exception as exc:  # ImportError, or any error its code raised
                raise InvalidHandler(
                    f"task function {path!r}: cannot import {module_name}: {exc}") from exc
    elif path not in _made_at_start_up:
        raise InvalidHandler(
            f"task function {path!r}: {module_name or path} is not in an installed app or "
            "ATP_HANDLER_MODULES, and no task was made at that path while Django started; "
            "it is not imported")
    elif module is None:
        raise InvalidHandler(f"task function {path!r}: {module_name} is not loaded")
    found = getattr(module, name, None)
    if not isinstance(found, Task) or found.module_path != path:
        raise InvalidHandler(f"{path!r} is not a task function (@task)")
    return found
