import re
from pathlib import Path

import pytest

import atp
from atp import api, engine
from atp.models import Instance
from atp.states import Status

README = Path(__file__).resolve().parent.parent / "README.md"


@pytest.mark.parametrize("name", api.__all__)
def test_every_api_name_is_importable_from_atp(name):
    assert getattr(atp, name) is getattr(api, name)


def test_unknown_names_are_not_invented():
    with pytest.raises(AttributeError, match="no attribute 'enqeue'"):
        atp.enqeue  # noqa: B018
    assert "enqueue" in dir(atp)


def test_the_verbs_users_call_are_the_engines():
    for name in ("enqueue", "enqueue_many", "dequeue", "delete_task", "purge_finished",
                 "register_task_type", "unregister_task_type", "get_response"):
        assert getattr(atp, name) is getattr(engine, name)


@pytest.mark.django_db
def test_the_readme_example_runs(capsys):
    """The README's example is code that works, not a sketch."""
    example = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    assert len(example.strip().splitlines()) <= 14
    # Run as a module under ATP_HANDLER_MODULES, where a real project keeps its handlers.
    exec(compile(example, str(README), "exec"), {"__name__": "tests.handlers.readme"})
    instance = Instance.objects.get(identifier="report-42")
    assert instance.status == Status.ACCEPTED and instance.load_inputs() == {"report": 42}
