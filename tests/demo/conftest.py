import pytest


@pytest.fixture(autouse=True)
def login_file(tmp_path, monkeypatch):
    """Keep the demo's login in a file of the test's own (``ATP_DEMO_LOGIN_FILE``)."""
    path = tmp_path / "demo-login"
    monkeypatch.setenv("ATP_DEMO_LOGIN_FILE", str(path))
    return path
