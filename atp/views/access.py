"""Who may see and change tasks through django-atp's pages."""

import hashlib
import hmac
from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied

from atp.permissions import CHANGE, DELETE, VIEW, VIEW_INPUTS, VIEW_RESPONSE

__all__ = ["CHANGE", "DELETE", "VIEW", "VIEW_INPUTS", "VIEW_RESPONSE", "bearer_token", "is_staff_with",
           "staff_member", "token_matches"]


def is_staff_with(user, permission):
    """Return whether ``user`` is an active staff member holding ``permission``."""
    return bool(user.is_authenticated and user.is_active and user.is_staff
                and user.has_perm(permission))


def staff_member(permission):
    """Let in active staff members holding ``permission``.

    The anonymous are sent to ``settings.LOGIN_URL``; anyone else is refused (403).
    """

    def decorator(view):
        @wraps(view)
        def guarded(request, *args, **kwargs):
            user = request.user
            if not user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not is_staff_with(user, permission):
                raise PermissionDenied
            return view(request, *args, **kwargs)

        return guarded

    return decorator


def bearer_token(request):
    """Return the token of the request's ``Authorization: Bearer`` header, or None when it
    has none (another scheme, such as a proxy's Basic, is not ours to judge)."""
    scheme, _, token = request.headers.get("Authorization", "").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def token_matches(given, expected):
    """Return whether the token ``given`` is ``expected`` (None: no token is), comparing in
    constant time so that the answer's timing tells nothing of how much of it matched, nor
    (both hashed first) of its length."""
    if expected is None or given is None:
        return False
    digests = [hashlib.sha256(token.encode()).digest() for token in (given, expected)]
    return hmac.compare_digest(*digests)
