"""An app whose ``tasks`` module declares a schedule at module level, as a project's would
(``tests/test_schedules.py`` runs ``manage.py migrate`` with it on a fresh database)."""
