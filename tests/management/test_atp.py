"""``manage.py atp``: each subcommand on the test database, in this process
(``call_command``) for what it does, and as a real ``python -m django atp`` process for
its exit codes, standard error and JSON."""

import datetime
import json
import os
import pwd
import socket
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db.models import F
from django.db.models.functions import Now

import atp
from atp.models import Daemon, Instance, LogRecord, Task
from atp.states import Status
from tests.factories import TaskFactory, snapshot
from tests.processes import PROJECT_ROOT, environment

pytestmark = pytest.mark.django_db


def atp_command(*args):
    """Run ``manage.py atp args --json`` here; return its parsed document."""
    out = StringIO()
    call_command("atp", *map(str, args), "--json", stdout=out)
    return json.loads(out.getvalue())


def refused(*args):
    """Run ``manage.py atp args --json`` here, expecting exit 1; return the error and document."""
    out = StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("atp", *map(str, args), "--json", stdout=out)
    assert caught.value.returncode == 1, caught.value
    return str(caught.value), json.loads(out.getvalue())


def bad_arguments(*args):
    """Run ``manage.py atp args`` here, expecting exit 2; return the error."""
    with pytest.raises(CommandError) as caught:
        call_command("atp", *map(str, args), stdout=StringIO())
    assert caught.value.returncode == 2, caught.value
    return str(caught.value)


def run_atp(*args, **extra_env):
    """Run ``python -m django atp args`` as a process on the test database."""
    return subprocess.run(
        [sys.executable, "-m", "django", "atp", *map(str, args)], cwd=PROJECT_ROOT,
        env=environment(**extra_env), capture_output=True, text=True, timeout=120,
    )


def cli_actor():
    user = pwd.getpwuid(os.geteuid()).pw_name
    return f"{user}@{socket.gethostname()} via manage.py atp"


# -- status and types ---------------------------------------------------------------


def test_status_counts_live_tasks_per_type_and_state_with_delayed_and_pull_types_apart(
        noop_type, daemon):
    TaskFactory(type=noop_type)
    TaskFactory(type=noop_type)
    atp.enqueue("tests.noop", countdown=600)
    TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)
    TaskFactory(type=noop_type, status=Status.FINISHED, daemon=daemon)
    atp.register_pull_type("tests.pull")
    atp.enqueue("tests.pull")
    atp.pause_type("tests.noop")

    document = atp_command("status")

    [noop] = [t for t in document["types"] if t["type"] == "tests.noop"]
    assert noop["live"] == {"ACCEPTED": 3, "SCHEDULED": 0, "RUNNING": 1, "PAUSED": 0}
    assert (noop["waiting"], noop["delayed"], noop["paused"]) == (2, 1, True)
    assert noop["ended_last_hour"]["FINISHED"] == 1
    assert [t["type"] for t in document["pull_types"]] == ["tests.pull"]
    assert "tests.pull" not in [t["type"] for t in document["types"]]
    # The paused type's tasks are held, the pull type's wait for a consumer: neither is
    # counted as waiting for a daemon (as the dashboard counts them).
    assert document["waiting"] | {"oldest_runnable_since": None, "oldest_wait_seconds": None} == {
        "runnable": 0, "delayed": 0, "pull": 1, "held": 3, "held_back": 0,
        "oldest_runnable_since": None, "oldest_wait_seconds": None}
    atp.resume_type("tests.noop")
    document = atp_command("status")
    assert (document["waiting"]["runnable"], document["waiting"]["delayed"]) == (2, 1)
    assert document["waiting"]["oldest_wait_seconds"] >= 0
    assert [(d["id"], d["running"]) for d in document["daemons"]] == [(daemon.pk, 1)]
    assert set(document["daemons"][0]) == {"id", "host", "pid", "workers", "running",
                                           "started", "heartbeat"}


def test_status_reads_as_a_table_marking_paused_types(noop_type):
    TaskFactory(type=noop_type)
    atp.pause_type("tests.noop")
    out = StringIO()
    call_command("atp", "status", stdout=out)
    [line] = [line for line in out.getvalue().splitlines() if "tests.noop" in line]
    assert "paused" in line and "no live daemon runs this type" in line
    assert "Waiting: 0 runnable, 0 delayed; 1 held (type paused), 0 for pull consumers" in (
        out.getvalue())
    assert "Live daemons: 0" in out.getvalue()


def test_types_shows_what_an_operator_tunes(db):
    atp.register_task_type("tests.noop", "tests.handlers.noop", timeout=90, max_restarts=2,
                           retry_limit=4, rate=2.5, max_concurrency=3, max_snoozes=9,
                           retention=datetime.timedelta(days=7))
    [noop] = [t for t in atp_command("types")["types"] if t["type"] == "tests.noop"]
    assert noop == {
        "type": "tests.noop", "handler": "tests.handlers.noop", "pull": False,
        "timeout_seconds": 90.0, "max_restarts": 2, "retry_limit": 4,
        "age_limit_seconds": None, "max_snoozes": 9, "rate": 2.5, "bucket_size": None, "max_concurrency": 3,
        "max_queued": None, "retention_seconds": 7 * 86400.0, "paused": False,
    }


# -- enqueue --------------------------------------------------------------------------


def test_enqueue_queues_a_task_through_the_api_and_prints_its_id(noop_type):
    out = StringIO()
    call_command("atp", "enqueue", "tests.noop", "--inputs", '{"n": [1, 2]}',
                 "--identifier", "nightly-1", "--priority", "5", "--countdown", "60", stdout=out)
    task = Instance.objects.get()
    assert out.getvalue().strip() == str(task.pk)
    assert (task.identifier, task.priority, task.status) == ("nightly-1", 5, Status.ACCEPTED)
    assert task.load_inputs() == {"n": [1, 2]}
    assert Task.objects.get(pk=task.pk).not_before > task.created


def test_enqueue_of_a_taken_name_is_refused_and_adds_nothing(noop_type):
    atp.enqueue("tests.noop", identifier="nightly-1")
    error, document = refused("enqueue", "tests.noop", "--identifier", "nightly-1")
    assert "already has 'nightly-1'" in error
    assert document["id"] is None and "nightly-1" in document["refused"]
    assert Instance.objects.count() == 1


@pytest.mark.parametrize("args, message", [
    (["enqueue", "tests.nope"], "no task type 'tests.nope' is registered"),
    (["enqueue", "tests.noop", "--inputs", "{bad"], "argument --inputs: is not JSON"),
    (["enqueue", "tests.noop", "--countdown=-1"], "must be a non-negative number, not '-1'"),
    (["enqueue", "tests.noop", "--countdown", "nan"], "must be a non-negative number"),
    (["enqueue", "tests.noop", "--priority", "99999"], "priority must be an integer from"),
    (["enqueue", "tests.noop", "--identifier", "a b"], "a task identifier has only letters"),
    (["cancel", "12x"], "'12x' is not a task number"),
    (["reenqueue", "99999999"], "no task #99999999: nothing was changed"),
    (["run-again"], "the following arguments are required: ID"),
    (["run-now", "#1"], "'#1' is not a task number"),
    (["retry", "--type", "tests.noop", "--state", "DONE"], "invalid choice: 'DONE'"),
    (["retry", "--type", "tests.noop", "--state", "FINISHED"], "invalid choice: 'FINISHED'"),
    (["retry", "--type", "tests.nope"], "no task type 'tests.nope' is registered"),
    (["retry", "--type", "tests.noop", "--since", "3 fortnights"], "must be a duration"),
    (["purge", "--older-than=-1h"], "must be a duration"),
    (["purge", "--type", "tests.nope"], "no task type 'tests.nope' is registered"),
])
def test_bad_arguments_get_a_clear_error_and_change_nothing(noop_type, row_counts, args, message):
    task = TaskFactory(type=noop_type, status=Status.CANCELLED)
    before, rows = snapshot(task), row_counts()
    assert message in bad_arguments(*args)
    assert (snapshot(task), row_counts()) == (before, rows)


# -- reenqueue, cancel, run-again and run-now -------------------------------------------------------------


def test_cancel_and_reenqueue_name_the_cli_and_the_os_user_in_the_history(noop_type):
    task = TaskFactory(type=noop_type)
    assert atp_command("cancel", task.pk) == {
        "tasks": [{"id": task.pk, "done": True, "status": "CANCELLED", "refused": None}],
        "done": 1, "refused": 0}
    assert atp_command("reenqueue", task.pk)["tasks"][0]["status"] == "ACCEPTED"
    history = list(LogRecord.objects.filter(instance=task).order_by("id")
                   .values_list("status", "actor"))
    assert history[-2:] == [(Status.CANCELLED, cli_actor()), (Status.ACCEPTED, cli_actor())]


def test_a_refusal_is_reported_and_the_other_tasks_are_changed(noop_type, daemon):
    finished = TaskFactory(type=noop_type, status=Status.FINISHED, daemon=daemon)
    queued = TaskFactory(type=noop_type)
    before = snapshot(finished)
    error, document = refused("cancel", finished.pk, queued.pk)
    assert error == "1 of 2 tasks refused"
    assert document["tasks"] == [
        {"id": finished.pk, "done": False, "status": "FINISHED", "refused": "already finished"},
        {"id": queued.pk, "done": True, "status": "CANCELLED", "refused": None},
    ]
    assert snapshot(finished) == before


def test_run_again_queues_a_new_task_and_run_now_ends_a_delay(noop_type, daemon):
    failed = TaskFactory(type=noop_type, status=Status.FAILED, daemon=daemon)
    document = atp_command("run-again", failed.pk)
    [line] = document["tasks"]
    assert line["done"] and line["status"] == "ACCEPTED" and line["new_id"] != failed.pk
    again = Instance.objects.get(pk=line["new_id"])
    assert (again.type_id, again.status) == (noop_type.pk, Status.ACCEPTED)
    assert Instance.objects.get(pk=failed.pk).status == Status.FAILED
    out = StringIO()
    call_command("atp", "run-again", failed.pk, stdout=out)
    assert out.getvalue().startswith(f"#{failed.pk} queued again as #")

    delayed = atp.enqueue("tests.noop", countdown=3600)
    assert atp_command("run-now", delayed.pk)["tasks"] == [
        {"id": delayed.pk, "done": True, "status": "ACCEPTED", "refused": None}]
    assert Task.objects.filter(pk=delayed.pk, not_before__lte=Now()).exists()
    # Runnable already, or not waiting: refused, and reported.
    error, document = refused("run-now", delayed.pk, failed.pk)
    assert error == "2 of 2 tasks refused"
    assert [t["done"] for t in document["tasks"]] == [False, False]
    error, document = refused("run-again", delayed.pk)
    assert document["tasks"] == [{"id": delayed.pk, "done": False, "status": "ACCEPTED",
                                  "refused": document["tasks"][0]["refused"], "new_id": None}]


def test_an_unknown_task_among_several_changes_none_of_them(noop_type):
    queued = TaskFactory(type=noop_type)
    assert "no task #424242" in bad_arguments("cancel", queued.pk, 424242)
    assert Instance.objects.get(pk=queued.pk).status == Status.ACCEPTED


# -- retry -------------------------------------------------------------------------------


def test_retry_re_enqueues_every_matching_task_in_batches(noop_type, daemon, monkeypatch):
    from atp import bulk

    monkeypatch.setattr(bulk, "BATCH_SIZE", 2)
    failed = [TaskFactory(type=noop_type, status=Status.FAILED, daemon=daemon) for _ in range(5)]
    cancelled = TaskFactory(type=noop_type, status=Status.CANCELLED)
    other_type = atp.register_task_type("tests.other", "tests.handlers.noop")
    other = TaskFactory(type=other_type, status=Status.FAILED, daemon=daemon)

    assert atp_command("retry", "--type", "tests.noop", "--dry-run") == {
        "type": "tests.noop", "state": "FAILED", "since_seconds": None, "dry_run": True,
        "matched": 5, "reenqueued": 0, "refused": {}, "failed": 0}
    assert Instance.objects.filter(status=Status.FAILED).count() == 6

    document = atp_command("retry", "--type", "tests.noop")
    assert (document["matched"], document["reenqueued"]) == (5, 5)
    statuses = dict(Instance.objects.values_list("pk", "status"))
    assert {statuses[t.pk] for t in failed} == {Status.ACCEPTED}
    assert (statuses[cancelled.pk], statuses[other.pk]) == (Status.CANCELLED, Status.FAILED)
    assert LogRecord.objects.filter(actor=cli_actor(), status=Status.ACCEPTED).count() == 5


def test_retry_since_takes_only_the_tasks_that_ended_lately(noop_type, daemon):
    old, new = (TaskFactory(type=noop_type, status=Status.FAILED, daemon=daemon) for _ in range(2))
    Instance.objects.filter(pk=old.pk).update(finished=F("finished") - datetime.timedelta(hours=3))
    assert atp_command("retry", "--type", "tests.noop", "--since", "2h", "--dry-run")["matched"] == 1
    atp_command("retry", "--type", "tests.noop", "--since", "2h")
    assert Instance.objects.get(pk=old.pk).status == Status.FAILED
    assert Instance.objects.get(pk=new.pk).status == Status.ACCEPTED


def test_retry_says_what_was_refused(db):
    atp.register_task_type("tests.noop", "tests.handlers.noop", dedup_window=None)
    TaskFactory(type="tests.noop", status=Status.CANCELLED, identifier="once")
    retried = TaskFactory(type="tests.noop", status=Status.CANCELLED)
    atp.enqueue("tests.noop", identifier="once")  # a live task takes the cancelled one's name
    error, document = refused("retry", "--type", "tests.noop", "--state", "CANCELLED")
    assert error == "some tasks were not re-enqueued"
    assert (document["matched"], document["reenqueued"]) == (2, 1)
    assert document["refused"] == {"a live task has its identifier": 1}
    assert Instance.objects.get(pk=retried.pk).status == Status.ACCEPTED


# -- purge ------------------------------------------------------------------------------


def test_purge_deletes_ended_tasks_older_than_asked(noop_type, daemon):
    old = TaskFactory(type=noop_type, status=Status.FINISHED, daemon=daemon)
    new = TaskFactory(type=noop_type, status=Status.FINISHED, daemon=daemon)
    live = TaskFactory(type=noop_type)
    Instance.objects.filter(pk=old.pk).update(finished=Now() - datetime.timedelta(days=2))
    assert atp_command("purge", "--type", "tests.noop", "--older-than", "1d") == {
        "type": "tests.noop", "older_than_seconds": 86400.0, "purged": 1}
    assert set(Instance.objects.values_list("pk", flat=True)) == {new.pk, live.pk}
    assert atp_command("purge")["purged"] == 0  # no retention: kept
    assert atp_command("purge", "--older-than", "0")["purged"] == 1


# -- doctor -----------------------------------------------------------------------------


@pytest.fixture
def space_to_spare(monkeypatch):
    """The tables' dead space is no finding of the test: a test's rows are rolled back, and
    on PostgreSQL (autovacuum off on this machine) every earlier test's rows are dead rows
    that the space check would rightly report after a few hundred tests. Its own test is
    ``test_doctor_reports_space_worth_giving_back``; its rules, ``tests/engine/test_databases.py``."""
    from django.db import connection

    from atp.engine.databases import database_of

    monkeypatch.setattr(type(database_of(connection)), "space_remedy", lambda self, size: "")


def test_doctor_finds_nothing_wrong_with_a_healthy_queue(noop_type, daemon, space_to_spare):
    TaskFactory(type=noop_type)
    TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)
    document = atp_command("doctor")
    assert document["healthy"] is True and document["findings"] == []
    assert abs(document["clock"]["host_ahead_seconds"]) < 1
    assert document["tables"] and all(size["bytes"] > 0 for size in document["tables"])


def test_doctor_finds_broken_invariants_and_says_what_to_do(noop_type, space_to_spare):
    task = TaskFactory(type=noop_type)
    Task.objects.filter(pk=task.pk).delete()  # as a bug would: an ACCEPTED task off the queue
    error, document = refused("doctor")
    assert error == "doctor found 1 problem"
    [finding] = document["findings"]
    assert finding["check"] == "invariant" and finding["tasks"] == [task.pk]
    assert "accepted-queued" in finding["message"] and "cancel and re-enqueue" in finding["advice"]


def test_doctor_finds_tasks_stuck_on_a_silent_daemon(noop_type, daemon, settings, space_to_spare):
    running = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)
    settings.ATP_DAEMON_TIMEOUT_SECONDS = 60
    assert atp_command("doctor")["healthy"]
    # Its heartbeat stops: an hour later on the database clock.
    Daemon.objects.filter(pk=daemon.pk).update(heartbeat=Now() - datetime.timedelta(hours=1))
    _, document = refused("doctor")
    [finding] = document["findings"]
    assert finding["check"] == "stuck" and finding["tasks"] == [running.pk]
    assert f"daemon #{daemon.pk}" in finding["message"] and "start atpd" in finding["advice"]


def test_doctor_finds_a_daemon_declared_dead_that_still_holds_leases(noop_type, daemon):
    running = TaskFactory(type=noop_type, status=Status.RUNNING, daemon=daemon)
    Daemon.objects.filter(pk=daemon.pk).update(stopped=Now())  # as a bug would leave it
    _, document = refused("doctor")
    checks = {finding["check"]: finding for finding in document["findings"]}
    assert checks["dead-daemon-leases"]["tasks"] == [running.pk]
    assert f"restart_leases({daemon.pk}" in checks["dead-daemon-leases"]["advice"]
    assert "in-flight-leased" in checks["invariant"]["message"]


def test_doctor_reports_space_worth_giving_back(noop_type, monkeypatch):
    from django.db import connection

    from atp.engine.databases import database_of

    database = type(database_of(connection))
    monkeypatch.setattr(database, "space_remedy", lambda self, size: "RECLAIM IT")
    _, document = refused("doctor")
    findings = [f for f in document["findings"] if f["check"] == "table-space"]
    assert findings and {f["advice"] for f in findings} == {"RECLAIM IT"}


# -- the command as a process: exit codes, standard error, JSON ----------------------------


@pytest.mark.once
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_exit_codes_standard_error_and_json_of_a_real_process(noop_type):
    enqueued = run_atp("enqueue", "tests.noop", "--inputs", '{"a": 1}', "--identifier", "one")
    assert (enqueued.returncode, enqueued.stderr) == (0, "")
    pk = int(enqueued.stdout)
    assert Instance.objects.get(pk=pk).identifier == "one"

    again = run_atp("enqueue", "tests.noop", "--identifier", "one", "--json")
    assert again.returncode == 1 and json.loads(again.stdout)["id"] is None
    assert again.stderr.strip().splitlines() == [
        "CommandError: not enqueued: a live task of type 'tests.noop' already has 'one'"]

    for args in (["enqueue", "tests.noop", "--inputs", "[1,"], ["enqueue", "tests.noop", "--countdown=-5"],
                 ["enqueue", "tests.nope"], ["cancel", "x1"], ["retry", "--type", "tests.noop",
                 "--state", "LOST"], ["purge", "--older-than", "soon"]):
        bad = run_atp(*args)
        assert bad.returncode == 2, (args, bad.stderr)
        assert len(bad.stderr.strip().splitlines()) == 1, (args, bad.stderr)
        assert bad.stdout == ""
    assert Instance.objects.count() == 1

    for subcommand in ("status", "types", "doctor"):
        # Django's own options are taken after the subcommand too, as by other commands.
        done = run_atp(subcommand, "--json", "--settings=tests.settings", "-v", "2")
        assert done.returncode == 0, done.stderr
        assert isinstance(json.loads(done.stdout), dict)

    cancelled = run_atp("cancel", pk, "--json", SUDO_USER="alice")
    assert cancelled.returncode == 0 and json.loads(cancelled.stdout)["done"] == 1
    assert LogRecord.objects.filter(instance_id=pk).latest("id").actor == (
        cli_actor() + (", sudo by alice" if pwd.getpwuid(os.geteuid()).pw_name != "alice" else ""))
    again = run_atp("cancel", pk)
    assert again.returncode == 1 and again.stdout.strip() == f"#{pk} refused: already cancelled"

    retried = run_atp("retry", "--type", "tests.noop", "--state", "cancelled", "--json")
    assert retried.returncode == 0 and json.loads(retried.stdout)["reenqueued"] == 1
    assert run_atp("purge", "--older-than", "1h").returncode == 0

    Task.objects.filter(pk=pk).delete()  # an ACCEPTED task off the queue, as a bug would
    sick = run_atp("doctor", "--json")
    assert sick.returncode == 1 and sick.stderr.strip() == "CommandError: doctor found 1 problem"
    assert json.loads(sick.stdout)["healthy"] is False


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_doctor_reports_the_settings_the_system_checks_flag(db):
    sick = run_atp("doctor", "--json", ATP_HEARTBEAT_INTERVAL_SECONDS="nan")
    assert sick.returncode == 1, sick.stderr
    [finding] = json.loads(sick.stdout)["findings"]
    assert finding["check"] == "system-check" and finding["message"].startswith("atp.E007: ")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_doctor_measures_this_hosts_clock_against_the_databases(tmp_path):
    from django.db import connection

    from tests import clockstep

    try:
        step = clockstep.build(tmp_path)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    step.step(120)
    result = run_atp("doctor", "--json", **step.environment)
    document = json.loads(result.stdout)
    if connection.vendor == "sqlite":
        # SQLite's clock is this host's: both moved together, so nothing is off.
        assert result.returncode == 0, result.stderr
        assert abs(document["clock"]["host_ahead_seconds"]) < 1
        return
    assert result.returncode == 1, result.stderr
    [finding] = document["findings"]
    assert finding["check"] == "clock-skew" and "ahead of the database's" in finding["message"]
    assert 119 < document["clock"]["host_ahead_seconds"] < 121


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_doctor_finds_the_task_of_a_frozen_daemon_stuck_until_a_live_one_takes_it(start_daemon):
    import signal

    from tests.processes import FAST_TIMERS, wait_until

    timers = {name: str(value) for name, value in FAST_TIMERS.items()}
    atp.register_task_type("tests.sleep", "tests.handlers.sleep")
    task = atp.enqueue("tests.sleep", {"seconds": 3})
    frozen = start_daemon("--workers", 1)
    wait_until(lambda: Instance.objects.get(pk=task.pk).status == Status.RUNNING, timeout=30,
               message="the task running", output=frozen.output)
    frozen.freeze()
    try:
        def stuck():
            result = run_atp("doctor", "--json", **timers)
            findings = json.loads(result.stdout)["findings"] if result.stdout else []
            return result.returncode == 1 and [f["check"] for f in findings] == ["stuck"] and \
                findings[0]["tasks"] == [task.pk]

        wait_until(stuck, timeout=30, message="doctor finds the task stuck")
        rescuer = start_daemon("--workers", 1)  # what doctor says to do
        wait_until(lambda: Instance.objects.get(pk=task.pk).status == Status.FINISHED,
                   timeout=60, message="the task finished elsewhere", output=rescuer.output)
        healthy = run_atp("doctor", "--json", **timers)
        assert healthy.returncode == 0, healthy.stdout
    finally:
        frozen.signal(signal.SIGCONT)
