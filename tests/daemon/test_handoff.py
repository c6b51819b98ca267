"""The tasks a supervisor hands a worker go down the pipe as plain values
(``atp.daemon.handoff``) and come out as the objects the claim returned."""

import multiprocessing
import os
import pickle

import pytest

import atp
from atp import engine
from atp.daemon import handoff
from atp.engine.outcomes import Outcome
from atp.models import Instance

pytestmark = pytest.mark.django_db


def _fields(obj):
    return {key: value for key, value in vars(obj).items() if key != "_state"}


def test_claimed_tasks_come_out_of_the_pipe_as_they_went_in(noop_type, daemon):
    other = atp.register_task_type("tests.other", "tests.handlers.noop", timeout=9)
    for n in range(6):
        atp.enqueue("tests.noop" if n % 2 else "tests.other", {"n": n}, tag=f"t{n}")
    claimed = engine.claim_for_daemon(daemon, 6, [noop_type.pk, other.pk])
    sent = [(task, task.attempt, task.type.handler, str(daemon)) for task in claimed]

    received = handoff.unpack(pickle.loads(pickle.dumps(handoff.pack(sent))))

    assert [(attempt, handler, label) for _, attempt, handler, label in received] == [
        (attempt, handler, label) for _, attempt, handler, label in sent]
    for (task, *_), (original, *_) in zip(received, sent, strict=True):
        assert type(task) is Instance and _fields(task) == _fields(original)
        assert (task._state.adding, task._state.db) == (False, original._state.db)
        assert _fields(task.type) == _fields(original.type)
        assert task.inputs.load() == original.inputs.load() and task.inputs.instance is task
    # A type goes once, and comes out as one object for its tasks.
    assert len({id(task.type) for task, *_ in received}) == 2


def test_a_task_handed_over_without_its_inputs_reads_them_when_asked(noop_type, daemon):
    queued = atp.enqueue("tests.noop", {"n": 7})
    task = Instance.objects.select_related("type").get(pk=queued.pk)
    [(received, *_)] = handoff.unpack(handoff.pack([(task, 0, "h", "d")]))
    assert received.inputs.load() == {"n": 7}  # read from the database


@pytest.mark.parametrize("outcome", [
    Outcome.finished(7, 2, {"n": 1}).since_start(0.25),
    Outcome.failed(7, 2, "boom", may_retry=True, countdown=3.0),
    Outcome.handed_back(7, 2, "not ours"),
    Outcome.snoozed(7, 2, 1.5, "not ready").since_start(0.1),
], ids=["finished", "failed, may retry", "handed back", "snoozed"])
def test_a_workers_report_comes_out_of_the_pipe_as_the_outcome_it_sent(outcome):
    ours, theirs = multiprocessing.Pipe()
    handoff.send(theirs, handoff.done(7, 2, outcome, 12.5))
    kind, pk, attempt, values, ended_at = ours.recv()
    assert (kind, pk, attempt, ended_at) == ("done", 7, 2, 12.5)
    received = handoff.outcome_of(values)
    assert received == outcome and type(received) is Outcome and hash(received) == hash(outcome)
    assert not any(isinstance(value, Outcome) for value in values)  # plain values on the wire


@pytest.fixture
def inbox():
    """An ``Inbox`` on our end of a real channel, and the worker's end."""
    ours, theirs = multiprocessing.Pipe(duplex=True)
    inbox = handoff.Inbox(ours)
    yield inbox, theirs
    inbox.close()
    ours.close()  # the inbox read from a copy of the descriptor: this one is still open
    theirs.close()


def test_an_inbox_takes_every_message_that_arrived_in_order_and_never_waits(inbox):
    inbox, theirs = inbox
    assert inbox.take() == []  # nothing yet: no waiting
    large = "x" * (handoff.READ_SIZE + 1000)  # more than one read takes
    sent = [("done", 1, 1, (1,), 0.5), ("dropped", 2, 1), ("done", 3, 2, (large,), 1.5)]
    for message in sent:
        handoff.send(theirs, message)
    theirs.send(("dropped", 4, 1))  # multiprocessing's own framing and pickler
    assert inbox.take() == [*sent, ("dropped", 4, 1)]
    assert inbox.take() == []


def test_an_inbox_keeps_a_message_that_came_in_part_until_the_rest_comes(inbox):
    inbox, theirs = inbox
    frame = pickle.dumps(("done", 5, 1, (None,), 2.0))
    framed = len(frame).to_bytes(4, "big") + frame
    os.write(theirs.fileno(), framed[:3])  # not even the whole length
    assert inbox.take() == []
    os.write(theirs.fileno(), framed[3:10])
    assert inbox.take() == []
    os.write(theirs.fileno(), framed[10:] + framed)  # the rest, and one more whole
    assert inbox.take() == [("done", 5, 1, (None,), 2.0)] * 2


def test_an_inbox_gives_what_a_worker_sent_before_its_end_closed_then_eof(inbox):
    inbox, theirs = inbox
    handoff.send(theirs, ("done", 6, 1, (None,), 3.0))
    os.write(theirs.fileno(), b"\0\0\0\x09abc")  # a message cut short by a death
    theirs.close()
    assert inbox.take() == [("done", 6, 1, (None,), 3.0)]
    with pytest.raises(EOFError):
        inbox.take()
    with pytest.raises(EOFError):
        inbox.take()
