import datetime

from django.utils import timezone

from atp.models import Instance
from atp.templatetags.atp import age, progress, status_badge, timestamp


def test_badges_are_escaped_labels_with_a_class_per_state():
    assert status_badge("FAILED") == '<span class="atp-status atp-status-failed">failed</span>'
    assert "message" in status_badge(None)


def test_progress_shows_a_bar_with_a_total_and_a_count_without():
    assert 'value="0.250"' in progress(Instance(progress_done=1, progress_total=4))
    assert progress(Instance(progress_done=7)) == '<span class="atp-progress-text">7</span>'
    assert progress(Instance()) == ""


def test_times_read_to_the_millisecond_and_ages_shortly():
    moment = datetime.datetime(2026, 11, 21, 10, 25, 59, 41234, tzinfo=datetime.UTC)
    assert timestamp(moment) == "2026-11-21 10:25:59.041"
    assert age(timezone.now() - datetime.timedelta(seconds=3)).endswith(" s")
    assert age(timezone.now() + datetime.timedelta(seconds=1)) == "0 ms"  # a database clock ahead
