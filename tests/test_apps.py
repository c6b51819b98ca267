import pytest
from django.core.management import call_command
from django.db import connection

from atp.models import Type

pytestmark = pytest.mark.django_db(transaction=True)


def test_migrate_writes_the_types_declared_in_code():
    Type.objects.filter(identifier="tests.declared").delete()
    call_command("migrate", verbosity=0)
    assert Type.objects.get(identifier="tests.declared").handler == "tests.handlers.declared"


def test_migrating_atp_away_does_not_try_to_write_types():
    call_command("migrate", "atp", "zero", verbosity=0)
    try:
        assert "atp_type" not in connection.introspection.table_names()
    finally:
        call_command("migrate", verbosity=0)
    assert Type.objects.filter(identifier="tests.declared").exists()
