"""A real Chromium, driven by Playwright, against the live test server.

The browser is Debian's Chromium (``make browser`` installs it). Without one the
tests are skipped with a message, except in CI, where that is a failure.
"""

import os
import shutil

import pytest

# Playwright's synchronous API keeps an asyncio loop in this thread; the ORM calls the
# tests make around it are synchronous all the same.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def chromium_path():
    return os.environ.get("ATP_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="session")
def browser():
    path = chromium_path()
    if path is None:
        message = "no Chromium: install it with `make browser` (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(f"the browser tests must run in CI but there is {message}")
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page
    context.close()


@pytest.fixture
def logged_in(page, live_server, django_user_model):
    """A page logged in as an operator through the admin's login form."""
    django_user_model.objects.create_superuser("operator", password="operator-pw")
    page.goto(f"{live_server.url}/admin/login/?next=/atp/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "operator-pw")
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/atp/")
    return page


def screenshot(page, name):
    """Save a screenshot for the docs when ATP_SCREENSHOTS names a folder."""
    folder = os.environ.get("ATP_SCREENSHOTS")
    if folder:
        page.screenshot(path=os.path.join(folder, f"{name}.png"), full_page=True)
