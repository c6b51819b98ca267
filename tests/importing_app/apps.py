from django.apps import AppConfig


class ImportingAppConfig(AppConfig):
    """An installed app that imports task functions from a package outside
    INSTALLED_APPS while Django starts, as Wagtail's search app imports ``modelsearch.tasks``."""

    name = "tests.importing_app"

    def ready(self):
        from tests.outside import tasks  # noqa: F401
