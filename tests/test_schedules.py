"""Periodic tasks: timetables (``atp.schedules``), ``atp.schedule`` and the daemons'
``enqueue_due``, on a clock the tests set: no test sleeps through a schedule."""

import datetime

import pytest
from django.db import connection
from django.test import override_settings

import atp
from atp import engine
from atp.exceptions import (
    InputsNotSerializable,
    InputsTooLarge,
    InvalidParameter,
    ScheduleNotFound,
    TaskTypeInUse,
    TaskTypeNotFound,
)
from atp.models import Instance, LogRecord, Schedule
from atp.schedules import Timetable, plan, run_identifier
from atp.states import Status
from tests.factories import drive
from tests.interleave import interleave

UTC = datetime.UTC
T0 = datetime.datetime(2026, 11, 25, 10, 15, tzinfo=UTC)
GRACE = datetime.timedelta(seconds=60)
#: An interval counts from the whole second of the database clock; ``created`` and
#: ``updated`` are read on this host's clock, up to a second later.
SLACK = datetime.timedelta(seconds=2)


def at(*args):
    return datetime.datetime(*args, tzinfo=UTC)


def seconds(n):
    return datetime.timedelta(seconds=n)


# -- timetables ------------------------------------------------------------------------


@pytest.mark.parametrize("cron, timezone, moment, expected", [
    ("*/15 * * * *", "", at(2026, 11, 25, 10, 7, 30), at(2026, 11, 25, 10, 15)),
    ("*/15 * * * *", "", at(2026, 11, 25, 10, 15), at(2026, 11, 25, 10, 30)),  # strictly after
    ("0 9 * * mon-fri", "", at(2026, 11, 27, 10), at(2026, 11, 30, 9)),  # Friday -> Monday
    ("0 9 * * *", "Europe/Paris", at(2026, 11, 25, 10), at(2026, 11, 26, 8)),  # winter: UTC+1
    ("0 9 * * *", "Europe/Paris", at(2026, 7, 1, 10), at(2026, 7, 2, 7)),  # summer: UTC+2
    ("* * * * * */20", "", at(2026, 11, 25, 10, 0, 5), at(2026, 11, 25, 10, 0, 20)),  # seconds
    ("@daily", "", at(2026, 11, 25, 10), at(2026, 11, 26)),
])
def test_a_cron_timetable_comes_due_at_its_next_matching_time(cron, timezone, moment, expected):
    assert Timetable.clean(cron=cron, timezone=timezone).first_after(moment) == expected


def test_an_interval_counts_from_the_second_it_was_set():
    timetable = Timetable.clean(interval=90)
    assert timetable.first_after(at(2026, 11, 25, 10, 0, 0) + datetime.timedelta(
        microseconds=700_000)) == at(2026, 11, 25, 10, 1, 30)
    series = at(2026, 11, 25, 10)
    assert timetable.next_after(series, at(2026, 11, 25, 10, 4, 29)) == at(2026, 11, 25, 10, 4, 30)
    assert timetable.next_after(series, at(2026, 11, 25, 10, 4, 30)) == at(2026, 11, 25, 10, 6)


@pytest.mark.parametrize("kind", ["interval", "cron"])
@pytest.mark.parametrize("catch_up, expected", [(1, [9]), (3, [7, 8, 9]), (20, list(range(10)))])
def test_a_daemon_back_after_ten_periods_enqueues_the_latest_catch_up_runs(kind, catch_up, expected):
    """Due at T0 + 0..9 minutes, found at T0 + 9 min 30 s."""
    timetable = (Timetable.clean(interval=60) if kind == "interval"
                 else Timetable.clean(cron="* * * * *"))
    result = plan(timetable, T0, T0 + seconds(9 * 60 + 30), catch_up, GRACE)
    assert result.runs == tuple(T0 + seconds(60 * k) for k in expected)
    assert result.next_run == T0 + seconds(600)
    skipped = 10 - len(expected)
    assert result.skipped == (None if not skipped else (T0, T0 + seconds(60 * (skipped - 1))))


def test_catch_up_zero_runs_a_due_time_within_the_grace_and_skips_older_ones():
    timetable = Timetable.clean(interval=3600)
    on_time = plan(timetable, T0, T0 + seconds(5), 0, GRACE)
    assert on_time.runs == (T0,) and on_time.skipped is None
    after_downtime = plan(timetable, T0, T0 + seconds(3 * 3600 + 120), 0, GRACE)
    assert after_downtime.runs == ()
    assert after_downtime.skipped == (T0, T0 + seconds(3 * 3600))
    assert after_downtime.next_run == T0 + seconds(4 * 3600)


def test_nothing_is_due_before_the_next_run():
    result = plan(Timetable.clean(interval=60), T0, T0 - seconds(1), 1, GRACE)
    assert result.runs == () and result.next_run == T0 and result.skipped is None


@pytest.mark.parametrize("arguments, message", [
    ({}, "either a cron expression or an interval"),
    ({"cron": "* * * * *", "interval": 60}, "not both"),
    ({"cron": "61 * * * *"}, "not a valid cron expression"),
    ({"cron": "every day"}, "not a valid cron expression"),
    ({"cron": "0 0 30 2 *"}, "not a valid cron expression"),  # never comes due
    ({"cron": "H * * * *"}, "not a valid cron expression"),
    ({"cron": "R * * * *"}, "random fields"),
    ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "not a time zone"),
    ({"interval": 60, "timezone": "Europe/Paris"}, "applies to a cron expression"),
    ({"interval": 0}, "whole number of seconds"),
    ({"interval": -60}, "whole number of seconds"),
    ({"interval": 1.5}, "whole number of seconds"),
    ({"interval": "60"}, "whole number of seconds"),
])
def test_a_bad_timetable_is_refused_with_a_clear_message(arguments, message):
    with pytest.raises(InvalidParameter, match=message):
        Timetable.clean(**arguments)


def test_a_run_is_named_after_its_schedule_and_due_time_in_utc():
    paris = datetime.timezone(datetime.timedelta(hours=1))
    assert run_identifier("nightly", T0.astimezone(paris)) == "sched-nightly-20261125T101500Z"


# -- atp.schedule ------------------------------------------------------------------------


def test_a_new_schedule_comes_due_at_its_first_due_time_from_now(noop_type):
    interval = atp.schedule("beat", "tests.noop", every=600, inputs={"n": 1})
    assert interval.next_run - interval.created == pytest.approx(seconds(600), abs=SLACK)
    cron = atp.schedule("quarterly", "tests.noop", cron="*/15 * * * *")
    assert cron.next_run.minute % 15 == 0 and cron.next_run.second == 0
    assert cron.next_run - cron.created <= seconds(15 * 60)
    assert Schedule.objects.get(name="beat").inputs == '{"n":1}'


def test_saving_a_schedule_again_keeps_its_due_time_and_a_new_timetable_recomputes_it(noop_type):
    first = atp.schedule("beat", "tests.noop", every=600)
    again = atp.schedule("beat", "tests.noop", every=600, priority=5, inputs=[1])
    assert again.next_run == first.next_run and again.priority == 5
    faster = atp.schedule("beat", "tests.noop", every=60)
    assert faster.next_run < first.next_run
    assert faster.next_run - faster.updated == pytest.approx(seconds(60), abs=SLACK)
    cron = atp.schedule("beat", "tests.noop", cron="0 0 1 1 *")
    assert (cron.next_run.month, cron.next_run.day, cron.next_run.hour) == (1, 1, 0)
    assert Schedule.objects.count() == 1


def test_enabling_a_schedule_again_starts_it_from_now(noop_type):
    schedule = atp.schedule("beat", "tests.noop", every=60, enabled=False)
    long_ago = at(2020, 1, 1)
    Schedule.objects.filter(pk=schedule.pk).update(next_run=long_ago)
    enabled = atp.schedule("beat", "tests.noop", every=60)
    assert enabled.next_run - enabled.updated == pytest.approx(seconds(60), abs=SLACK)
    assert engine.enqueue_due() == []


@pytest.mark.parametrize("switch", [
    lambda: engine.set_schedule_enabled("beat", False),  # the admin's actions
    lambda: engine.save_schedule("beat", "tests.noop", every=60, enabled=False),  # its form
], ids=["action", "form"])
def test_a_declaration_at_start_up_leaves_a_schedule_an_operator_disabled_off(
        noop_type, switch):
    """A review found a schedule an operator had disabled enabled again by the next
    deploy, which declares its schedules at start-up."""
    atp.schedule("beat", "tests.noop", every=60)
    switch()
    again = atp.schedule("beat", "tests.noop", every=120, inputs={"n": 2}, priority=3)
    assert not again.enabled
    # The code's fields are the code's: the declaration changed them.
    assert (again.interval, again.inputs, again.priority) == (seconds(120), '{"n":2}', 3)
    assert engine.enqueue_due(now=again.next_run + seconds(600)) == []
    # Turned on again by the operator, it stays the operator's: a declaration that
    # says off leaves it on.
    engine.set_schedule_enabled("beat", True)
    assert atp.schedule("beat", "tests.noop", every=120, enabled=False).enabled


def test_a_declaration_switches_a_schedule_no_operator_switched(noop_type):
    assert not atp.schedule("beat", "tests.noop", every=60, enabled=False).enabled
    assert atp.schedule("beat", "tests.noop", every=60).enabled
    assert not atp.schedule("beat", "tests.noop", every=60, enabled=False).enabled


@pytest.mark.parametrize("arguments, error", [
    ({"cron": "not cron"}, InvalidParameter),
    ({"cron": "* * * * *", "every": 60}, InvalidParameter),
    ({}, InvalidParameter),
    ({"every": 60, "inputs": object()}, InputsNotSerializable),
    ({"every": 60, "priority": 40000}, InvalidParameter),
    ({"every": 60, "catch_up": -1}, InvalidParameter),
    ({"every": 60, "enabled": "yes"}, InvalidParameter),
    ({"every": 60, "timezone": "Europe/Paris"}, InvalidParameter),
])
def test_bad_input_changes_nothing(noop_type, arguments, error):
    before = atp.schedule("beat", "tests.noop", every=600, inputs={"n": 1})
    with pytest.raises(error):
        atp.schedule("beat", "tests.noop", **arguments)
    after = Schedule.objects.get(name="beat")
    assert (after.interval, after.cron, after.next_run, after.inputs, after.updated) == (
        before.interval, before.cron, before.next_run, before.inputs, before.updated)


def test_an_unknown_type_a_bad_name_or_too_large_inputs_create_nothing(noop_type):
    with pytest.raises(TaskTypeNotFound):
        atp.schedule("beat", "tests.missing", every=60)
    with pytest.raises(InvalidParameter, match="letters, digits"):
        atp.schedule("beat 1", "tests.noop", every=60)
    atp.register_task_type("tests.small", "tests.handlers.noop", max_input_bytes=10)
    with pytest.raises(InputsTooLarge):
        atp.schedule("beat", "tests.small", every=60, inputs="x" * 20)
    assert not Schedule.objects.exists()


def test_unschedule_deletes_it_and_leaves_its_tasks(noop_type):
    schedule = atp.schedule("beat", "tests.noop", every=60)
    [task] = engine.enqueue_due(now=schedule.next_run)
    atp.unschedule("beat")
    assert not Schedule.objects.exists() and Instance.objects.filter(pk=task.pk).exists()
    with pytest.raises(ScheduleNotFound):
        atp.unschedule("beat")


def test_a_scheduled_type_cannot_be_unregistered(noop_type):
    atp.schedule("beat", "tests.noop", every=60)
    with pytest.raises(TaskTypeInUse, match="schedule"):
        atp.unregister_task_type("tests.noop")


# -- enqueue_due -------------------------------------------------------------------------


def test_a_due_run_is_enqueued_once_with_its_name_and_history(noop_type):
    schedule = atp.schedule("beat", "tests.noop", every=60, inputs={"n": 1}, priority=3)
    due = schedule.next_run
    assert engine.enqueue_due(now=due - seconds(1)) == []
    [task] = engine.enqueue_due(now=due + seconds(0.5))
    assert task.identifier == run_identifier("beat", due)
    assert (task.status, task.priority, task.load_inputs()) == (Status.ACCEPTED, 3, {"n": 1})
    history = list(LogRecord.objects.filter(instance=task).values_list("status", "message"))
    assert history[0] == (Status.ACCEPTED, "enqueued")
    assert history[1][0] is None
    assert "schedule beat" in history[1][1] and due.strftime("%Y-%m-%dT%H:%M:%SZ") in history[1][1]
    assert engine.enqueue_due(now=due + seconds(0.5)) == []
    schedule.refresh_from_db()
    assert (schedule.last_run, schedule.next_run) == (due, due + seconds(60))


def test_each_due_time_gets_its_own_task(noop_type):
    schedule = atp.schedule("beat", "tests.noop", every=60)
    due = schedule.next_run
    names = [task.identifier for k in range(3) for task in engine.enqueue_due(
        now=due + seconds(60 * k + 1))]
    assert names == [run_identifier("beat", due + seconds(60 * k)) for k in range(3)]


def test_a_daemon_down_for_ten_periods_enqueues_catch_up_runs_the_latest(noop_type):
    one = atp.schedule("one", "tests.noop", every=60)
    three = atp.schedule("three", "tests.noop", every=60, catch_up=3)
    none = atp.schedule("none", "tests.noop", every=60, catch_up=0)
    Schedule.objects.update(next_run=T0)
    with override_settings(ATP_SCHEDULE_GRACE_SECONDS=10):  # the latest is 30 s late
        enqueued = engine.enqueue_due(now=T0 + seconds(9 * 60 + 30))
    names = sorted(task.identifier for task in enqueued)
    assert names == sorted([run_identifier("one", T0 + seconds(540))] + [
        run_identifier("three", T0 + seconds(60 * k)) for k in (7, 8, 9)])
    for schedule in (one, three, none):
        schedule.refresh_from_db()
        assert schedule.next_run == T0 + seconds(600)
    assert none.last_run is None
    [first_of_three] = [t for t in enqueued if t.identifier.endswith("T102200Z")]
    message = LogRecord.objects.filter(instance=first_of_three, status=None).get().message
    assert "from 2026-11-25T10:15:00Z to 2026-11-25T10:21:00Z" in message and "catch_up 3" in message


def test_catch_up_zero_still_runs_an_on_time_due_time(noop_type):
    schedule = atp.schedule("beat", "tests.noop", every=3600, catch_up=0)
    with override_settings(ATP_SCHEDULE_GRACE_SECONDS=10):
        assert len(engine.enqueue_due(now=schedule.next_run + seconds(5))) == 1
        assert engine.enqueue_due(now=schedule.next_run + seconds(3600 + 11)) == []
    schedule.refresh_from_db()
    assert schedule.next_run - schedule.last_run == seconds(7200)


def test_a_disabled_schedule_enqueues_nothing(noop_type):
    schedule = atp.schedule("beat", "tests.noop", every=60, enabled=False)
    assert engine.enqueue_due(now=schedule.next_run + seconds(3600)) == []
    schedule.refresh_from_db()
    assert schedule.last_run is None and not Instance.objects.exists()


def test_a_run_whose_task_is_still_queued_is_not_enqueued_twice(noop_type):
    schedule = atp.schedule("beat", "tests.noop", every=60)
    atp.enqueue("tests.noop", identifier=run_identifier("beat", schedule.next_run))
    assert engine.enqueue_due(now=schedule.next_run) == []
    assert Instance.objects.count() == 1
    due = schedule.next_run
    schedule.refresh_from_db()
    assert (schedule.last_run, schedule.next_run) == (due, due + seconds(60))


def test_a_run_the_queue_has_no_room_for_is_skipped_and_the_schedule_goes_on(noop_type):
    atp.register_task_type("tests.bounded", "tests.handlers.noop", max_queued=1)
    schedule = atp.schedule("beat", "tests.bounded", every=60)
    atp.enqueue("tests.bounded")
    assert engine.enqueue_due(now=schedule.next_run) == []
    due = schedule.next_run
    schedule.refresh_from_db()
    assert (schedule.last_run, schedule.next_run) == (None, due + seconds(60))


def test_a_row_with_a_broken_timetable_is_disabled_not_retried_forever(noop_type, caplog):
    schedule = atp.schedule("beat", "tests.noop", every=60)
    Schedule.objects.filter(pk=schedule.pk).update(cron="61 * * * *", interval=None)
    assert engine.enqueue_due(now=schedule.next_run) == []
    assert not Schedule.objects.get(pk=schedule.pk).enabled
    assert "schedule beat disabled" in caplog.text


def test_seconds_to_next_run_reads_the_database_clock(noop_type):
    assert engine.seconds_to_next_run() is None
    atp.schedule("beat", "tests.noop", every=600)
    atp.schedule("off", "tests.noop", every=60, enabled=False)
    assert 598 < engine.seconds_to_next_run() <= 600


# -- several daemons ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_two_daemons_enqueueing_the_same_due_time_enqueue_it_once():
    """The first holds the schedule (its row on PostgreSQL, the write lock on SQLite)
    when the second looks: the second skips it, or waits and finds it done."""
    atp.register_task_type("tests.noop", "tests.handlers.noop")
    schedule = atp.schedule("beat", "tests.noop", every=60)
    now = schedule.next_run + seconds(1)
    first, second = interleave(lambda: engine.enqueue_due(now=now),
                               lambda: engine.enqueue_due(now=now),
                               pause_after=r'(?i)INSERT INTO "?atp_instance')
    assert len(first.get()) + len(second.get()) == 1
    if connection.vendor == "postgresql":
        assert not second.waited  # it skipped the row the first held, and went on
    assert list(Instance.objects.values_list("identifier", flat=True)) == [
        run_identifier("beat", schedule.next_run)]


@pytest.mark.django_db(transaction=True)
def test_a_due_time_is_enqueued_once_even_when_its_task_ends_at_once():
    """The first daemon holds the due schedule, read, when a second one enqueues its
    runs and finishes their tasks (which frees their names): the task names alone would
    not stop the first from enqueueing the run again; holding the schedule does."""
    atp.register_task_type("tests.noop", "tests.handlers.noop")
    schedule = atp.schedule("beat", "tests.noop", every=60)
    now = schedule.next_run + seconds(1)

    def enqueue_and_finish():
        tasks = engine.enqueue_due(now=now)
        for task in tasks:
            drive(task, Status.FINISHED)
        return tasks

    first, second = interleave(lambda: engine.enqueue_due(now=now), enqueue_and_finish,
                               pause_after=r'"atp_schedule"\."id" = ')
    assert len(first.get()) + len(second.get()) == 1
    assert Instance.objects.count() == 1


def test_the_daemons_run_once_entry_enqueues_what_is_due_and_says_when_next(noop_type):
    from atp.daemon import maintenance

    assert maintenance.enqueue_due_schedules() == (0, None)
    schedule = atp.schedule("beat", "tests.noop", every=60)
    Schedule.objects.filter(pk=schedule.pk).update(next_run=at(2020, 1, 1))
    enqueued, seconds_left = maintenance.enqueue_due_schedules()
    assert enqueued == 1 and 0 < seconds_left <= 60
    assert maintenance.enqueue_due_schedules() == (0, pytest.approx(seconds_left, abs=1))


# -- declared in code, from the first migrate on --------------------------------------------


@pytest.fixture
def declarations():
    """Declare schedules as an app's ``tasks`` module does while Django starts."""
    from atp import schedules

    yield schedules.declare
    schedules.forget_declarations()


def test_declarations_are_written_each_alone_a_refused_one_logged(noop_type, declarations,
                                                                   caplog):
    declarations("beat", {"type_identifier": "tests.noop", "every": 60, "inputs": {"n": 1}})
    declarations("lost", {"type_identifier": "tests.missing", "every": 60})
    [saved] = engine.sync_declared_schedules()
    assert (saved.name, saved.inputs, saved.enabled) == ("beat", '{"n":1}', True)
    assert not Schedule.objects.filter(name="lost").exists()
    assert "schedule lost, declared in code, is not saved" in caplog.text
    assert "tests.missing" in caplog.text
    engine.set_schedule_enabled("beat", False)
    engine.sync_declared_schedules()  # as at the next start: the operator's choice stands
    assert not Schedule.objects.get(name="beat").enabled



@pytest.fixture
def fresh_database(tmp_path):
    """Return the name of a database no migration ran on: a new file on SQLite, a new
    database on a server (dropped after the test)."""
    if connection.vendor == "sqlite":
        yield str(tmp_path / "fresh.sqlite3")
        return
    name = f"{connection.settings_dict['NAME']}_fresh"
    quoted = connection.ops.quote_name(name)
    with connection.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {quoted}")
        cursor.execute(f"CREATE DATABASE {quoted}")
    yield name
    # Every process of the test has exited (PostgreSQL waits a few seconds for their
    # sessions to end).
    with connection.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {quoted}")


def run_in(database, *arguments, code=None):
    """Run ``python -m django arguments...`` (or ``code`` once Django is set up) with the
    ``tests.declaring`` app on ``database``; return its output, failing on an error."""
    import subprocess
    import sys

    from tests.processes import PROJECT_ROOT, environment

    if code is not None:
        arguments = ["-c", f"import django; django.setup()\n{code}"]
    else:
        arguments = ["-m", "django", *arguments]
    done = subprocess.run(
        [sys.executable, *arguments], cwd=PROJECT_ROOT, capture_output=True, text=True,
        timeout=120, env=environment(DJANGO_SETTINGS_MODULE="tests.declaring.settings",
                                     ATP_TEST_DB_NAME=database))
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def declared(database):
    import json

    return json.loads(run_in(database, code=(
        "import json; from atp.models import Schedule\n"
        "print(json.dumps(list(Schedule.objects.values_list("
        "'name', 'type__identifier', 'cron', 'inputs', 'enabled'))))")))


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_schedule_declared_in_a_tasks_module_works_from_the_first_migrate_on(fresh_database):
    """A review found ``manage.py migrate`` on a fresh database crashing (``no such table:
    atp_type``) when an app's ``tasks`` module, which atp imports at start-up, declared
    a schedule at module level."""
    run_in(fresh_database, "migrate", "--noinput")
    expected = ["nightly-report", "declaring.report", "30 2 * * *", '{"report":"daily"}']
    assert declared(fresh_database) == [[*expected, True]]
    # An operator turns it off: neither the next migrate nor a daemon's start (each
    # writes the declarations) turns it on again.
    run_in(fresh_database, code="from atp import engine; "
                                "engine.set_schedule_enabled('nightly-report', False)")
    run_in(fresh_database, "migrate", "--noinput")
    run_in(fresh_database, "atpd", "--burst")
    assert declared(fresh_database) == [[*expected, False]]
    # Deleted, it comes back at the next daemon's start.
    run_in(fresh_database, code="import atp; atp.unschedule('nightly-report')")
    run_in(fresh_database, "atpd", "--burst")
    assert declared(fresh_database) == [[*expected, True]]
