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


@pytest.fixture
def declared_schedule():
    """A schedule declared as in an app's ``tasks`` module while Django started."""
    from atp import schedules

    schedules.declare("declared", {"type_identifier": "tests.declared", "every": 60})
    yield
    schedules.forget_declarations()


def test_migrate_writes_the_schedules_declared_in_code(declared_schedule):
    from atp.models import Schedule

    call_command("migrate", verbosity=0)
    assert Schedule.objects.get(name="declared").type.identifier == "tests.declared"


def test_migrating_atp_back_does_not_write_schedules_to_a_table_it_left_behind(
        declared_schedule):
    """Its post_migrate leaves them for the migrate that brings the columns back (a
    write then failed, and the migrate with it)."""
    from atp.models import Schedule

    call_command("migrate", "atp", "0014", verbosity=0)  # before a column of Schedule
    try:
        with connection.cursor() as cursor:
            columns = [column.name for column in
                       connection.introspection.get_table_description(cursor, "atp_schedule")]
        assert "switched_by_operator" not in columns
    finally:
        call_command("migrate", verbosity=0)
    assert Schedule.objects.filter(name="declared").exists()
