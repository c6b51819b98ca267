import django
import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

import atp
from tests.conftest import ROLES

pytestmark = pytest.mark.django_db

TOKEN = "s3cret-token-for-the-scraper_0123456789"
#: Who may read the metrics through a session: active staff with atp.view_instance.
READERS = {"view only", "reads inputs and responses", "can change", "superuser"}


@pytest.fixture
def token(settings):
    settings.ATP_METRICS_TOKEN = TOKEN
    return TOKEN


def figures(response):
    return {s.name: s.value for f in text_string_to_metric_families(response.content.decode())
            for s in f.samples if not s.labels}


@pytest.mark.parametrize("role", list(ROLES))
def test_the_metrics_are_for_staff_who_may_view_tasks(log_in, noop_type, role):
    atp.enqueue("tests.noop")
    response = log_in(role).get("/atp/metrics")
    if role in READERS:
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/plain; version=")
        assert 'atp_queue_depth{type="tests.noop"} 1.0' in response.content.decode()
    else:
        assert response.status_code == (401 if role == "anonymous" else 403)
        assert b"atp_" not in response.content
    assert response["Cache-Control"].startswith("max-age=0")


def test_an_anonymous_scraper_is_asked_for_a_bearer_token(client, token):
    response = client.get("/atp/metrics")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="atp"'
    assert b"atp_" not in response.content


def test_the_right_token_reads_the_metrics(client, token, noop_type):
    response = client.get("/atp/metrics", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    assert figures(response)["atp_daemons_live"] == 0


@pytest.mark.parametrize("header", [
    f"Bearer {TOKEN[:-1]}", f"Bearer {TOKEN}x", f"Bearer {TOKEN.upper()}", "Bearer ", "Bearer",
    f"bearer {TOKEN[1:]}",
])
def test_a_wrong_token_is_refused_even_with_a_staff_session(log_in, token, header):
    response = log_in("superuser").get("/atp/metrics", headers={"Authorization": header})
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="atp", error="invalid_token"'
    assert b"atp_" not in response.content


def test_a_token_reads_nothing_while_no_token_is_set(client, settings):
    settings.ATP_METRICS_TOKEN = None
    response = client.get("/atp/metrics", headers={"Authorization": "Bearer None"})
    assert response.status_code == 401


def test_a_proxys_basic_credentials_leave_the_session_to_judge(log_in, token):
    response = log_in("view only").get("/atp/metrics", headers={"Authorization": "Basic Zm9vOmJhcg=="})
    assert response.status_code == 200


def test_the_metrics_are_read_not_written(log_in, token):
    client = log_in("superuser")
    assert client.post("/atp/metrics", headers={"Authorization": f"Bearer {token}"}).status_code == 405
    assert client.head("/atp/metrics", headers={"Authorization": f"Bearer {token}"}).status_code == 200


@pytest.mark.skipif(django.VERSION < (5, 1), reason="LoginRequiredMiddleware came in Django 5.1")
def test_a_site_that_requires_logins_still_lets_machines_reach_the_probes(client, settings, token):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django.contrib.auth.middleware.LoginRequiredMiddleware"]
    assert client.get("/atp/health").status_code == 200
    assert client.get("/atp/metrics", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    assert client.get("/atp/").status_code == 302


def test_the_health_probe_answers_anyone_in_json(client, noop_type):
    healthy = client.get("/atp/health")
    assert (healthy.status_code, healthy["Content-Type"]) == (200, "application/json")
    assert healthy.json()["status"] == "ok"
    assert healthy["Cache-Control"].startswith("max-age=0")
    atp.enqueue("tests.noop")
    unhealthy = client.get("/atp/health")
    assert unhealthy.status_code == 503
    assert unhealthy.json()["unserved_types"] == {"tests.noop": 1}
    assert client.post("/atp/health").status_code == 405


def test_without_prometheus_client_the_metrics_say_what_to_install(log_in, monkeypatch):
    import sys

    # None in sys.modules makes "import prometheus_client" fail as if it were not installed.
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    monkeypatch.delitem(sys.modules, "atp.metrics", raising=False)
    response = log_in("view only").get("/atp/metrics")
    assert response.status_code == 501
    assert b"django-atp[metrics]" in response.content
    assert Client().get("/atp/metrics").status_code == 401, "the refusal comes first"
