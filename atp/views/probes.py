"""What machines read: the Prometheus figures and the health probe.

Neither sends anyone to a login page. The metrics answer a staff member with
``atp.view_instance`` (a browser) or a scraper with ``ATP_METRICS_TOKEN`` as a bearer
token, and refuse anyone else with no figure (401, or 403 for a user without the
permission). The health probe answers everyone: a load balancer has no login.
"""

from django.http import HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from atp.conf import conf
from atp.health import check_health
from atp.views.access import VIEW, bearer_token, is_staff_with, token_matches

try:  # Django 5.1+: exempt from LoginRequiredMiddleware, which would redirect machines
    from django.contrib.auth.decorators import login_not_required
except ImportError:  # pragma: no cover - Django before 5.1 has no such middleware
    def login_not_required(view):
        return view


def _plain(message, status):
    return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")


def _unauthorized(error=None):
    response = _plain("Authentication required: a staff login or ATP_METRICS_TOKEN.", 401)
    challenge = 'Bearer realm="atp"'
    if error:
        challenge += f', error="{error}"'
    response.headers["WWW-Authenticate"] = challenge
    return response


def _metrics_refusal(request):
    """Return the refusal of a request that may not read the metrics, or None."""
    token = bearer_token(request)
    if token is not None:  # a client that shows a token is judged by it alone
        return None if token_matches(token, conf.METRICS_TOKEN) else _unauthorized("invalid_token")
    if is_staff_with(request.user, VIEW):
        return None
    if request.user.is_authenticated:
        return _plain("Forbidden: the metrics need the permission atp.view_instance.", 403)
    return _unauthorized()


@login_not_required
@require_safe
@never_cache
def metrics(request):
    """Serve the queue's figures in Prometheus' text format (or OpenMetrics, if asked)."""
    refusal = _metrics_refusal(request)
    if refusal is not None:
        return refusal
    try:
        from atp.metrics import exposition
    except ImportError:
        return _plain("The metrics need prometheus-client: pip install django-atp[metrics]", 501)
    body, content_type = exposition(request.headers.get("Accept"))
    return HttpResponse(body, content_type=content_type)


@login_not_required
@require_safe
@never_cache
def health(request):
    """Answer 200 when the queue can make progress, 503 naming what is wrong; JSON either way."""
    report = check_health()
    return JsonResponse(report.as_json(), status=200 if report.is_healthy else 503)
