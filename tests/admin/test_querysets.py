import datetime

import pytest
from django.test import override_settings

import atp
from atp.admin.querysets import DateProbingQuerySet
from atp.models import Instance

pytestmark = pytest.mark.django_db

MOMENTS = ["2024-12-31 23:30", "2025-01-01 00:30", "2025-01-15 12:00", "2025-03-02 08:00",
           "2025-03-02 22:00", "2026-07-04 10:00"]


@pytest.fixture
def spread(noop_type):
    tasks = atp.enqueue_many("tests.noop", [{}] * len(MOMENTS))
    for task, moment in zip(tasks, MOMENTS, strict=True):
        when = datetime.datetime.fromisoformat(moment).replace(tzinfo=datetime.UTC)
        Instance.objects.filter(pk=task.pk).update(created=when)
    return tasks


def probing(queryset):
    return DateProbingQuerySet(model=Instance, query=queryset.query.chain(), using=queryset.db)


@pytest.mark.parametrize("zone", ["UTC", "Europe/Vienna", "America/Chicago"])
@pytest.mark.parametrize("kind", ["year", "month", "day"])
def test_probing_finds_exactly_the_periods_django_finds(spread, kind, zone):
    with override_settings(TIME_ZONE=zone):
        for queryset in (Instance.objects.all(), Instance.objects.filter(pk__in=[t.pk for t in spread[1:4]])):
            expected = list(queryset.datetimes("created", kind))
            assert probing(queryset).datetimes("created", kind) == expected
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
