"""Who may see and change tasks through django-atp's pages."""

from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied

from atp.permissions import CHANGE, VIEW, VIEW_INPUTS, VIEW_RESPONSE

__all__ = ["CHANGE", "VIEW", "VIEW_INPUTS", "VIEW_RESPONSE", "staff_member"]


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
            if not (user.is_active and user.is_staff and user.has_perm(permission)):
                raise PermissionDenied
            return view(request, *args, **kwargs)

        return guarded

    return decorator
