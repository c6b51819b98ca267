"""django-atp: Asynchronous Task Processing for Django.

The API of ``atp.api`` is importable from here (``atp.enqueue``, ``atp.task_type``,
...). It is loaded on first use, because this package is imported while Django is
still loading its apps, before models may be imported.
"""

__version__ = "0.1.0.dev0"

_LIGHT = {"task_type": "atp.registry", "Status": "atp.states", "Retry": "atp.exceptions",
          "Snooze": "atp.exceptions",
          "PermanentFailure": "atp.exceptions"}


def __getattr__(name):
    import importlib

    module = _LIGHT.get(name)
    if module is None:
        api = importlib.import_module("atp.api")
        if name not in api.__all__:
            raise AttributeError(f"module 'atp' has no attribute {name!r}")
        return getattr(api, name)
    return getattr(importlib.import_module(module), name)


def __dir__():
    import importlib

    return sorted(set(globals()) | set(_LIGHT) | set(importlib.import_module("atp.api").__all__))
