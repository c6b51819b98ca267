"""The benchmarks' own database: made anew for each run."""

import os


def recreate_postgres(url):
    """Drop and create the PostgreSQL database ``url`` names."""
    import psycopg

    base, _, name = url.rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')


def set_up_django(settings_module):
    """Start Django with ``settings_module`` and migrate its database."""
    os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
