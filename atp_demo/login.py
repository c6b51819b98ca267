"""The demo's login, kept across runs in a file beside the project (``.demo/login``, or
the file ``ATP_DEMO_LOGIN_FILE`` names), so that ``make demo`` prints the same one each
time until it is asked to reset it."""

import json
import os
import secrets
from pathlib import Path

from django.contrib.auth import get_user_model

DEFAULT_LOGIN_FILE = Path(__file__).resolve().parent.parent / ".demo" / "login"


def login_file():
    """Return the path of the file that keeps the demo's login."""
    return Path(os.environ.get("ATP_DEMO_LOGIN_FILE") or DEFAULT_LOGIN_FILE)


def read_login():
    """Return the kept ``(username, password)``, or None when there is none."""
    try:
        kept = json.loads(login_file().read_text())
        return kept["username"], kept["password"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def ensure_login(username, *, reset=False):
    """Make ``username`` a superuser whose password is the kept one (a new one with
    ``reset``, or when none is kept for it); keep it; return ``(password, is_new)``."""
    kept = read_login()
    password = kept[1] if kept and kept[0] == username and not reset else None
    is_new = password is None
    user, _ = get_user_model().objects.get_or_create(username=username)
    user.is_staff = user.is_superuser = user.is_active = True
    if is_new:
        password = secrets.token_urlsafe(9)
    if is_new or not user.check_password(password):
        user.set_password(password)
    user.save()
    path = login_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(json.dumps({"username": username, "password": password}))
    return password, is_new
