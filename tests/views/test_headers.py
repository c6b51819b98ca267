"""Every answer of atp's pages: never markup from the address, and headers that let a
browser run only atp's own script."""

from unittest import mock
from urllib.parse import urlencode

import pytest
from django.http import QueryDict
from django.test import override_settings
from django.urls import URLPattern, reverse

import atp
from atp.states import Status
from atp.urls import urlpatterns
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db

MARKUP = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "RUNNING<svg onload=alert(1)>",
    "1'><b>bold</b>",
]


class RecordingQueryDict(QueryDict):
    """A query string that remembers which parameters were read from it."""

    read = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def getlist(self, key, default=None):
        self.read.add(key)
        return super().getlist(key, default)

    def __contains__(self, key):
        self.read.add(key)
        return super().__contains__(key)


@pytest.fixture
def operator(log_in):
    return log_in("superuser")


@pytest.fixture
def pages(noop_type):
    """Every route of atp.urls, with arguments that name something, and its method."""
    task = TaskFactory(type=noop_type, status=Status.RUNNING, inputs={"a": 1})
    atp.set_response(task, "done")
    arguments = {
        "dashboard": {}, "task_list": {}, "task_bulk": {}, "task_detail": {"pk": task.pk},
        "task_status": {"pk": task.pk}, "task_response": {"pk": task.pk},
        "task_action": {"pk": task.pk, "verb": "pause"},
        "type_detail": {"pk": noop_type.pk},
        "type_action": {"pk": noop_type.pk, "verb": "pause"},
        "metrics": {}, "health": {},
    }
    names = {pattern.name for pattern in urlpatterns if isinstance(pattern, URLPattern)}
    assert names == set(arguments), "a new page of atp.urls must be fuzzed here too"
    posted = {"task_action", "type_action", "task_bulk"}
    return [(reverse(f"atp:{name}", kwargs=kwargs), "post" if name in posted else "get")
            for name, kwargs in arguments.items()]


def parameters_read(client, url, method):
    """Return the names of the parameters (query or form) the page at ``url`` reads."""
    RecordingQueryDict.read = set()
    with mock.patch("django.core.handlers.wsgi.QueryDict", RecordingQueryDict), \
            mock.patch("django.http.request.QueryDict", RecordingQueryDict):
        getattr(client, method)(url)
    return set(RecordingQueryDict.read)


def send(client, method, url, name, payload):
    if method == "get":
        return client.get(url, {name: payload})
    return client.post(f"{url}?{urlencode({name: payload})}", {name: payload})


def assert_safe(response, payload, where):
    assert response.status_code < 500, where
    assert response["X-Content-Type-Options"] == "nosniff", where
    assert response.get("Content-Security-Policy"), where
    body = response.content.decode("utf-8", "replace")
    if payload in body:
        kind = response["Content-Type"].split(";")[0]
        assert kind in ("text/plain", "application/json"), f"{where}: raw markup in {kind}"


def test_no_page_answers_markup_it_was_given(operator, pages):
    read = {url: parameters_read(operator, url, method) | {"x"} for url, method in pages}
    assert {"partial", "type", "status", "before", "after"} <= set().union(*read.values())
    for url, method in pages:
        for name in sorted(read[url]):
            for payload in MARKUP:
                response = send(operator, method, url, name, payload)
                assert_safe(response, payload, f"{method.upper()} {url} {name}={payload}")
        if method == "post":  # and asked the wrong way
            assert_safe(send(operator, "get", url, "x", MARKUP[0]), MARKUP[0], f"GET {url}")


def test_an_unknown_state_is_refused_in_plain_text(operator):
    response = operator.get("/atp/tasks/", {"status": "<script>alert(1)</script>"})
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/plain")
    assert response["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize("role", ["anonymous", "staff without permissions", "superuser"])
def test_every_answer_carries_the_policy_whoever_asks(log_in, noop_type, role):
    client = log_in(role)
    task = TaskFactory(type=noop_type)
    for url in ["/atp/", "/atp/tasks/", f"/atp/tasks/{task.pk}/", f"/atp/tasks/{task.pk}.json",
                "/atp/tasks/999999/", f"/atp/tasks/{task.pk}/cancel/"]:
        response = client.get(url)
        policy = response["Content-Security-Policy"]
        assert response["X-Content-Type-Options"] == "nosniff", url
        assert "script-src 'self'" in policy and "default-src 'none'" in policy, url
        assert "unsafe-inline" not in policy and "frame-ancestors 'none'" in policy, url


def test_a_response_download_keeps_its_sandbox(operator, noop_type):
    task = TaskFactory(type=noop_type)
    atp.set_response(task, "<b>hi</b>", content_type="text/html")
    policy = operator.get(f"/atp/tasks/{task.pk}/response")["Content-Security-Policy"]
    assert policy.startswith("sandbox")


@override_settings(STATIC_URL="https://cdn.example.com/static/")
def test_static_files_served_from_elsewhere_are_allowed(operator):
    policy = operator.get("/atp/")["Content-Security-Policy"]
    assert "script-src 'self' https://cdn.example.com;" in policy
    assert "style-src 'self' https://cdn.example.com;" in policy
