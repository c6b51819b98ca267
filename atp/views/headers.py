"""The headers every answer of atp's pages carries, whatever the project's middleware.

A page of atp runs one script, ``atp/live.js``, and one stylesheet, both static files;
nothing inline. So a browser is told to run nothing else (a Content-Security-Policy)
and not to guess types (``nosniff``): markup that slipped into an answer stays inert.
An answer that set its own policy (a response download, sandboxed) keeps it.
"""

from functools import wraps
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.core.handlers.exception import response_for_exception
from django.http import Http404, HttpResponseBadRequest

#: What atp's pages need: their static files, ``fetch`` of their own parts, forms that
#: post to themselves. No inline script or style, no frames, no plugins.
POLICY = ("default-src 'none'; script-src {static}; style-src {static}; img-src {static}; "
          "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


def content_security_policy():
    """Return the policy of atp's pages, allowing static files where ``STATIC_URL`` is."""
    sources = ["'self'"]
    address = urlsplit(settings.STATIC_URL or "")
    if address.netloc:  # static files on another host (a CDN)
        sources.append(f"{address.scheme}://{address.netloc}" if address.scheme
                       else address.netloc)
    return POLICY.format(static=" ".join(sources))


def with_page_headers(view):
    """Decorate an atp page so that every answer, refusals and 404s included, carries
    ``X-Content-Type-Options: nosniff`` and atp's Content-Security-Policy."""

    @wraps(view)
    def guarded(request, *args, **kwargs):
        try:
            response = view(request, *args, **kwargs)
        except (Http404, PermissionDenied) as exc:
            # Answered here rather than by Django's handler, so that the page saying
            # "not found" or "forbidden" carries the headers too.
            response = response_for_exception(request, exc)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Content-Security-Policy", content_security_policy())
        return response

    return guarded


def bad_request(message):
    """Return a 400 answer saying ``message`` in plain text, never read as markup."""
    return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")
