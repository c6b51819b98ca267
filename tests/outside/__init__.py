"""A package outside INSTALLED_APPS and ATP_HANDLER_MODULES, as a library's that a
project's app imports while Django starts (Wagtail's search app imports
``modelsearch.tasks``): ``tests.importing_app`` imports ``tests.outside.tasks`` in its
``ready()``. Nothing imports ``tests.outside.never_imported``."""
