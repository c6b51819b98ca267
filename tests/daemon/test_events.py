from atp.daemon.events import Every


def test_a_timer_is_due_at_once_then_an_interval_after_each_time_it_was_done():
    timer = Every(5)
    assert timer.is_due(0)
    timer.done(10)
    assert not timer.is_due(14.9) and timer.is_due(15)

