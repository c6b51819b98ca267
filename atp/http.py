"""Serving a task's stored response to a browser without letting it run anything."""

import mimetypes
import re

from django.http import HttpResponse
from django.utils.http import content_disposition_header

#: Types a browser shows without running anything in them; all others are downloads.
SAFE_INLINE_TYPES = frozenset({
    "text/plain", "text/csv", "application/json",
    "image/png", "image/jpeg", "image/gif", "image/webp",
})
# type/subtype, then optional parameters: nothing that could break out of the header.
MEDIA_TYPE = re.compile(r"[\w.+-]+/[\w.+-]+(?:[ \t]*;[ \t]*[\w.+-]+=[\w.+\"-]+)*", re.ASCII)
FALLBACK_TYPE = "application/octet-stream"
#: The usual extension of common types (``mimetypes`` answers ".xsl" for XML on some systems).
EXTENSIONS = {
    "text/plain": ".txt", "text/csv": ".csv", "text/html": ".html", "text/xml": ".xml",
    "application/xml": ".xml", "application/json": ".json", "image/svg+xml": ".svg",
    "image/jpeg": ".jpg", "image/png": ".png", "application/pdf": ".pdf",
}
SANDBOX = "sandbox; default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'"


def media_type(content_type):
    """Return the lower-case ``type/subtype`` of a content type (without parameters)."""
    return content_type.split(";", 1)[0].strip().lower()


def is_inline_image(content_type):
    """Return whether a response of ``content_type`` is an image a page may show inline."""
    kind = media_type(content_type or "")
    return kind.startswith("image/") and kind in SAFE_INLINE_TYPES


def serve_response(response, filename_stem):
    """Return an ``HttpResponse`` with the stored ``response``, safe to open in a browser.

    Plain text, JSON and raster images are shown inline; HTML, SVG, XML and anything
    else are downloaded. The browser is told not to guess the type and, whatever it
    shows, to run nothing in it.
    """
    content_type = response.content_type
    if not MEDIA_TYPE.fullmatch(content_type or ""):
        content_type = FALLBACK_TYPE
    if response.charset and "charset=" not in content_type:
        content_type = f"{content_type}; charset={response.charset}"
    kind = media_type(content_type)
    extension = EXTENSIONS.get(kind) or mimetypes.guess_extension(kind) or ".bin"
    http = HttpResponse(bytes(response.data), content_type=content_type)
    http["Content-Disposition"] = content_disposition_header(
        as_attachment=kind not in SAFE_INLINE_TYPES, filename=f"{filename_stem}{extension}"
    )
    http["X-Content-Type-Options"] = "nosniff"
    http["Content-Security-Policy"] = SANDBOX
    return http
