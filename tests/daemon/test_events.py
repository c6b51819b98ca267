from atp.daemon.events import Every, Paced


def test_a_timer_is_due_at_once_then_an_interval_after_each_time_it_was_done():
    timer = Every(5)
    assert timer.is_due(0)
    timer.done(10)
    assert not timer.is_due(14.9) and timer.is_due(15)


def test_paced_work_comes_again_soon_while_it_finds_some_then_waits_an_interval():
    purges = Paced(5, 0.05)
    assert purges.is_due(0)
    purges.done(10, found_work=True)
    assert purges.is_due(10.05) and not purges.is_due(10.04)
    purges.done(10.05, found_work=False)
    assert not purges.is_due(15.04) and purges.is_due(15.05)
