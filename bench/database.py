"""The benchmarks' own database: made anew for each run."""

import os


def recreate_postgres(url):
    """Drop and create the PostgreSQL database ``url`` names."""
    import psycopg

    base, _, name = url.rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')


def recreate_mysql(url):
    """Drop and create the MariaDB/MySQL database ``url`` names."""
    from urllib.parse import urlsplit

    import MySQLdb

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = MySQLdb.connect(host=parts.hostname, port=parts.port or 3306,
                            user=parts.username or "root", password=parts.password or "")
    try:
        cursor = admin.cursor()
        cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    finally:
        admin.close()


def recreate(url):
    """Drop and create the server database ``url`` names; return False for a SQLite URL."""
    if url.startswith(("postgres://", "postgresql://")):
        recreate_postgres(url)
    elif url.startswith("mysql://"):
        recreate_mysql(url)
    else:
        return False
    return True


def set_up_django(settings_module):
    """Start Django with ``settings_module`` and migrate its database."""
    os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
