import datetime

import pytest
from django.test import override_settings

import atp
from atp import registry
from atp.exceptions import InvalidHandler, InvalidParameter
from tests import handlers


def test_a_module_level_function_of_an_allowed_module_resolves():
    assert registry.resolve_handler("tests.handlers.echo") is handlers.echo


@pytest.mark.parametrize(
    "path, reason",
    [
        ("os.system", "not in an installed app or in ATP_HANDLER_MODULES"),
        ("builtins.exec", "not in an installed app or in ATP_HANDLER_MODULES"),
        ("system", "not in an installed app or in ATP_HANDLER_MODULES"),
        ("tests.handlers.getpid", "is not a function defined in tests.handlers"),
        ("tests.handlers.missing", "is not a function defined in tests.handlers"),
        ("tests.handlers.atp", "is not a function defined in tests.handlers"),
        ("tests.handlersX.echo", "not in an installed app"),
        ("tests.handlers.sub.echo", "cannot import tests.handlers.sub"),
        ("django.db.models.base.Model.delete", "not in an installed app"),
    ],
)
def test_anything_else_is_refused(path, reason):
    with pytest.raises(InvalidHandler, match=reason):
        registry.resolve_handler(path)


def test_handlers_of_installed_apps_are_allowed_without_settings():
    with override_settings(ATP_HANDLER_MODULES=[]):
        assert registry.is_allowed_module("atp.anything")
        assert not registry.is_allowed_module("tests.handlers")


def local_function_factory():
    def nested(task, inputs):
        return None

    return nested


class Holder:
    def method(self, task, inputs):
        return None


@pytest.mark.parametrize(
    "func", [lambda task, inputs: None, local_function_factory(), print, Holder.method]
)
def test_only_module_level_functions_can_be_handlers(func):
    with pytest.raises(InvalidHandler, match="module-level function"):
        registry.handler_path(func)


def test_register_handler_refuses_a_module_that_is_not_allowed():
    with pytest.raises(InvalidHandler, match="tests.test_registry is not in an installed app"):
        registry.register_handler(local_function_factory)


def test_the_decorator_records_a_declaration_and_returns_the_function():
    declaration = registry.declarations()["tests.declared"]
    assert declaration.handler == "tests.handlers.declared"
    assert declaration.parameters["max_restarts"] == 1
    assert handlers.declared.task_type == "tests.declared"
    assert handlers.declared(None, None) == "declared"


@pytest.mark.parametrize(
    "identifier, parameters, message",
    [
        ("", {}, "non-empty string"),
        ("x" * 256, {}, "at most 255"),
        ("ok", {"timout": 5}, "unknown task type parameter\\(s\\) timout"),
        ("ok", {"timeout": 0}, "timeout must be a positive"),
        ("ok", {"timeout": 1e20}, "timeout must be a positive .* at most 36500 days"),
        ("ok", {"timeout": float("nan")}, "timeout must be a positive"),
        ("ok", {"retention": datetime.timedelta(days=40000)}, "retention must be a positive"),
        ("ok", {"max_restarts": -1}, "max_restarts must be an integer from 0 to 32767"),
        ("ok", {"max_restarts": 40000}, "max_restarts must be an integer from 0 to 32767"),
        ("ok", {"max_concurrency": 0}, "max_concurrency must be an integer from 1 to"),
        ("ok", {"input_format": "yaml"}, "input_format must be one of"),
    ],
)
def test_bad_declarations_are_refused_at_import(identifier, parameters, message):
    before = registry.declarations()
    with pytest.raises(InvalidParameter, match=message):
        atp.task_type(identifier, **parameters)
    assert registry.declarations() == before


def test_type_parameters_are_normalised():
    cleaned = registry.clean_type_parameters({"timeout": 1.5, "retention": None})
    assert cleaned["timeout"].total_seconds() == 1.5
    assert cleaned["retention"] is None
