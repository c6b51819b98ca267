import pytest

import atp
from atp import api, engine


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
