import datetime

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import atp
from atp.admin import querysets
from atp.admin.querysets import DateProbingQuerySet
from atp.models import Instance

pytestmark = pytest.mark.django_db

MOMENTS = ["2024-12-31 23:30", "2025-01-01 00:30", "2025-01-15 12:00", "2025-03-02 08:00",
           "2025-03-02 22:00", "2026-07-04 10:00"]
ZONES = ["UTC", "Europe/Vienna", "America/Chicago"]


@pytest.fixture
def spread(noop_type):
    tasks = atp.enqueue_many("tests.noop", [{}] * len(MOMENTS))
    for task, moment in zip(tasks, MOMENTS, strict=True):
        when = datetime.datetime.fromisoformat(moment).replace(tzinfo=datetime.UTC)
        Instance.objects.filter(pk=task.pk).update(created=when)
    return tasks


def probing(queryset):
    return DateProbingQuerySet(model=Instance, query=queryset.query.chain(), using=queryset.db)


def periods_of(queryset, kind):
    """The local years, months or days ``queryset``'s tasks were created in, as Django's
    ``datetimes()`` gives them where the database knows the time zone."""
    starts = set()
    for moment in queryset.values_list("created", flat=True):
        local = timezone.localtime(moment)
        day = local.date().replace(**{"year": {"month": 1, "day": 1}, "month": {"day": 1}}.get(kind, {}))
        starts.add(timezone.make_aware(datetime.datetime.combine(day, datetime.time())))
    return sorted(starts)


def selections(spread):
    return Instance.objects.all(), Instance.objects.filter(pk__in=[t.pk for t in spread[1:4]])


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("kind", ["year", "month", "day"])
def test_probing_finds_exactly_the_periods_django_finds(spread, kind, zone):
    with override_settings(TIME_ZONE=zone):
        for queryset in selections(spread):
            expected = periods_of(queryset, kind)
            if connection.features.has_zoneinfo_database:
                assert list(queryset.datetimes("created", kind)) == expected
            assert probing(queryset).datetimes("created", kind) == expected
            assert probing(queryset).datetimes("created", kind, "DESC") == expected[::-1]


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("kind", ["year", "month", "day"])
def test_too_many_periods_to_probe_are_found_without_the_databases_time_zones(
        spread, kind, zone, monkeypatch):
    """Past ``MAX_PROBES`` periods, a database without time-zone tables (MariaDB's and
    MySQL's unless loaded) is walked from period to period, one probe each."""
    monkeypatch.setattr(querysets, "MAX_PROBES", 1)
    monkeypatch.setattr(connection.features, "has_zoneinfo_database", False)
    with override_settings(TIME_ZONE=zone):
        for queryset in selections(spread):
            expected = periods_of(queryset, kind)
            with CaptureQueriesContext(connection) as queries:
                assert probing(queryset).datetimes("created", kind) == expected
            assert len(queries) == 1 + len(expected)  # the bounds, then a probe per period
            assert probing(queryset).datetimes("created", kind, "DESC") == expected[::-1]


def test_an_empty_selection_has_no_periods(noop_type):
    assert probing(Instance.objects.all()).datetimes("created", "month") == []


def test_remembered_bounds_belong_to_one_queryset_only(spread):
    from django.db.models import Max, Min

    everything = probing(Instance.objects.all())
    bounds = everything.aggregate(first=Min("created"), last=Max("created"))
    assert everything.aggregate(first=Min("created"), last=Max("created")) == bounds
    narrowed = everything.filter(pk__in=[t.pk for t in spread[1:3]])
    assert narrowed.aggregate(first=Min("created"), last=Max("created")) != bounds
