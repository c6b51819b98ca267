"""Every list of atp's admin, asked for odd addresses: 4xx or an empty list, never a 500."""

import pytest
from django.contrib import admin
from django.contrib.messages import ERROR, get_messages
from django.db import models
from django.test import Client
from django.utils import timezone

import atp
from atp import engine
from atp.states import Status
from tests import handlers
from tests.factories import TaskFactory

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # The admin reads a date in the address in the current time zone, and Django says so.
    pytest.mark.filterwarnings("ignore:.*received a naive datetime:RuntimeWarning"),
]

NUL = "\x00"
HUGE = "9" * 30
ATP_MODELS = sorted((model for model in admin.site._registry
                     if model._meta.app_label == "atp"), key=lambda model: model.__name__)


def field_lookups(field):
    """Yield ``{lookup: value}`` on ``field`` with values no row can match or its column
    cannot hold: NUL characters, numbers past its range, impossible dates."""
    name = field.name
    target = field
    while target.is_relation:
        target = target.target_field
    yield {f"{name}__isnull": NUL}
    if isinstance(target, (models.IntegerField, models.AutoField)):
        paths = [name] + ([f"{name}__{field.target_field.name}"] if field.is_relation else [])
        for path in paths:
            yield from ({f"{path}__exact": HUGE}, {f"{path}__gt": HUGE}, {f"{path}__lt": HUGE},
                        {f"{path}__in": f"1,{HUGE}"}, {path: "abc"}, {path: NUL})
    elif isinstance(target, (models.DateTimeField, models.DateField)):
        yield from ({f"{name}__gte": NUL}, {f"{name}__gte": "99999-01-01"},
                    {f"{name}__lt": "0001-01-01"}, {f"{name}__gt": "9999-12-31 23:59:59"},
                    {f"{name}__year": HUGE}, {f"{name}__year": "10000"},
                    {f"{name}__month": "13"}, {f"{name}__date": "2026-02-30"})
    elif isinstance(target, models.DurationField):
        yield from ({f"{name}__gt": HUGE}, {name: "300"}, {name: "abc"})
    elif isinstance(target, models.BooleanField):
        yield from ({name: NUL}, {name: "maybe"})
    else:
        yield from ({name: NUL}, {f"{name}__in": f"a,{NUL}"}, {f"{name}__startswith": NUL})


def odd_addresses(model, model_admin, filter_parameters):
    """Yield query strings (as dicts) that a list of ``model`` must survive."""
    for field in model._meta.concrete_fields:
        yield from field_lookups(field)
    for parameter in filter_parameters:  # the dropdowns and other filters of the list
        # (Django reads any value of __isnull but "", "0" and "false" as true.)
        for value in [NUL] if parameter.endswith("__isnull") else [NUL, HUGE, "abc", f"1,{HUGE}"]:
            yield {parameter: value}
    if model_admin.search_fields:
        for term in [NUL, f"a{NUL}b", HUGE, "a" * 10_000]:
            yield {"q": term}
    hierarchy = model_admin.date_hierarchy
    if hierarchy:
        for year, month, day in [(HUGE, None, None), ("9999", None, None), ("9999", "12", None),
                                 ("9999", "12", "31"), ("1", None, None), ("2026", "13", None),
                                 ("2026", "2", "30"), ("0", None, None), (NUL, None, None)]:
            parameters = {f"{hierarchy}__year": year, f"{hierarchy}__month": month,
                          f"{hierarchy}__day": day}
            yield {key: value for key, value in parameters.items() if value is not None}


#: Not filters: where Django shows the list anyway (a page past the end: the last one).
NOT_FILTERS = [{"p": HUGE}, {"p": "-1"}, {"p": NUL}, {"o": NUL}, {"o": HUGE}, {"o": "1.-2.x"},
               {"all": NUL}, {"e": "1"}, {"_to_field": NUL}, {"_popup": NUL}]


@pytest.fixture
def every_row(noop_type):
    """A row in every table, so that an empty list means the address matched nothing."""
    daemon = engine.register_daemon(workers=1)
    done = TaskFactory(type=noop_type, status=Status.FINISHED, daemon=daemon, inputs={"a": 1})
    atp.set_response(done, "done")
    TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)
    atp.schedule("beat", "tests.noop", every=60, inputs={"n": 1})
    with atp.batch(handlers.multiply, name="nightly"):
        atp.enqueue("tests.noop", {})
    atp.set_semaphore("gpu", 2)


def outcome(client, url, parameters):
    response = client.get(url, parameters)
    where = f"{url}?{parameters!r} answered {response.status_code}"
    context = response.context or {}
    refused = [m for m in get_messages(response.wsgi_request) if m.level == ERROR]
    shown = context["cl"].result_count if "cl" in context else None
    return response.status_code, shown, refused, where


@pytest.mark.slow  # about a thousand requests; tests/views/test_access.py keeps a few fast
@pytest.mark.parametrize("model", ATP_MODELS, ids=lambda model: model.__name__)
def test_every_list_answers_odd_addresses_with_4xx_or_an_empty_list(every_row, model,
                                                                    django_user_model):
    operator = django_user_model.objects.create_superuser("operator", password="pw")
    client = Client(raise_request_exception=False)
    client.force_login(operator)
    url = f"/admin/atp/{model._meta.model_name}/"
    model_admin = admin.site._registry[model]
    plain = client.get(url)
    assert plain.status_code == 200 and plain.context["cl"].result_count > 0
    filters = {parameter for spec in plain.context["cl"].filter_specs
               for parameter in spec.expected_parameters()}
    failures = []
    for parameters in odd_addresses(model, model_admin, filters):
        status, shown, refused, where = outcome(client, url, parameters)
        # Django's search form refuses a NUL character itself, with a message.
        if not (400 <= status < 500 or (status == 200 and (shown == 0 or refused))):
            failures.append(where)
    for parameters in NOT_FILTERS:
        status, _, _, where = outcome(client, url, parameters)
        if status >= 500:
            failures.append(where)
    assert failures == []


def test_a_value_the_column_holds_still_filters(every_row, log_in):
    client = log_in("superuser")
    today = timezone.localdate()
    for parameters, count in [({"status__exact": "FINISHED"}, 1), ({"id__gt": "0"}, 3),
                              ({"id__lt": "9223372036854775807"}, 3),
                              ({"created__gte": "2000-01-01"}, 3),
                              ({"created__year": str(today.year), "created__month":
                                str(today.month)}, 3)]:
        response = client.get("/admin/atp/instance/", parameters)
        assert response.context["cl"].result_count == count, parameters
