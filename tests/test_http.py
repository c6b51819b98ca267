import pytest

from atp.http import media_type, serve_response
from atp.models import Response


def response(data, content_type, charset=""):
    return Response(data=data, content_type=content_type, charset=charset, size=len(data))


def test_harmless_types_are_shown_and_the_rest_downloaded():
    shown = serve_response(response(b"{}", "application/json", "utf-8"), "task-1")
    assert shown["Content-Disposition"] == 'inline; filename="task-1.json"'
    assert shown["Content-Type"] == "application/json; charset=utf-8"
    page = serve_response(response(b"<h1>", "TEXT/HTML; charset=utf-8"), "task-1")
    assert page["Content-Disposition"] == 'attachment; filename="task-1.html"'


def test_a_malformed_content_type_cannot_inject_headers():
    served = serve_response(response(b"x", "text/plain\r\nSet-Cookie: a=b"), "task-9")
    assert served["Content-Type"] == "application/octet-stream"
    assert "Set-Cookie" not in served


@pytest.mark.parametrize("content_type", [
    "text/plain\n", "text/plain; charset=utf-8\n", "téxt/plain", "text/plain;\ncharset=utf-8",
])
def test_a_content_type_with_anything_after_or_inside_is_refused(content_type):
    served = serve_response(response(b"x", content_type), "task-9")
    assert served["Content-Type"] == "application/octet-stream"


def test_every_response_forbids_sniffing_and_scripts():
    served = serve_response(response(b"\x89PNG", "image/png"), "task-2")
    assert served["X-Content-Type-Options"] == "nosniff"
    assert served["Content-Security-Policy"].startswith("sandbox")
    assert served.content == b"\x89PNG"
    assert media_type("Image/PNG; q=1") == "image/png"
