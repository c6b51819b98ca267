from atp.liveness import Watch


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_a_counter_is_silent_once_it_stood_still_for_the_whole_time_out():
    clock = Clock()
    watch = Watch(clock)
    assert watch.silent({"a": 5}, 30) == {}  # first seen: its time-out begins now
    clock.now += 29.9
    assert watch.silent({"a": 5}, 30) == {}
    clock.now += 0.1
    assert watch.silent({"a": 5}, 30) == {"a": 5}


def test_a_counter_that_moved_begins_its_time_out_again():
    clock = Clock()
    watch = Watch(clock)
    watch.silent({"a": 5}, 30)
    clock.now += 29
    assert watch.silent({"a": 6}, 30) == {}
    clock.now += 29
    assert watch.silent({"a": 6}, 30) == {}, "judged from when it was first seen at 5"
    clock.now += 1
    assert watch.silent({"a": 6}, 30) == {"a": 6}


def test_a_counter_that_went_back_is_news_too():
    clock = Clock()
    watch = Watch(clock)
    watch.silent({"a": 5}, 30)
    clock.now += 40
    assert watch.silent({"a": 0}, 30) == {}


def test_what_is_no_longer_there_is_forgotten_and_starts_afresh():
    clock = Clock()
    watch = Watch(clock)
    watch.silent({"a": 5, "b": 1}, 30)
    clock.now += 20
    watch.silent({"b": 1}, 30)
    clock.now += 20
    assert watch.silent({"a": 5, "b": 1}, 30) == {"b": 1}


def test_a_new_watch_judges_nothing_before_a_whole_time_out():
    """An observer that has just started may not declare anyone dead at once, however
    old the stamps it finds: it has seen nothing stand still yet."""
    clock = Clock()
    assert Watch(clock).silent({"a": 5}, 0.5) == {}
