"""The demo project's pages inside the test suite: its URLs and templates, at a test's pace."""

from tests.processes import PROJECT_ROOT

#: The scenarios' figures in tests: a quilt that fills in seconds, a small quick image.
QUICK = {
    "QUILT_SECONDS": (0.1, 0.4),
    "FRACTAL": {"width": 96, "height": 72, "iterations": 60, "seconds": 1},
    "LIMITED_TASKS": 3,
    "TICK_SECONDS": 1,
}


def use_demo_site(settings, monkeypatch):
    """Serve the demo project's URLs and templates, with its scenarios at the test's pace."""
    from atp_demo import scenarios

    settings.ROOT_URLCONF = "atp_demo.urls"
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": [PROJECT_ROOT / "templates"]}]
    for name, value in QUICK.items():
        monkeypatch.setattr(scenarios, name, value)
