"""Template helpers for django-atp's pages and admin: ``{% load atp %}``."""

import datetime

from django import template
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from atp.presentation import excerpt as failure_excerpt
from atp.presentation import format_duration, seconds_in_zone
from atp.states import Status

register = template.Library()


@register.filter
def duration(delta):
    return format_duration(delta)


@register.simple_tag
def status_badge(status):
    """Return a coloured badge for a task state."""
    if not status:
        return mark_safe('<span class="atp-status atp-status-message">message</span>')
    return format_html(
        '<span class="atp-status atp-status-{}">{}</span>', status.lower(), Status(status).label
    )


@register.simple_tag
def progress(instance):
    """Return a progress bar with ``done of total``, or the bare count when there is no total."""
    done, total = instance.progress_done, instance.progress_total
    if done is None:
        return ""
    fraction = instance.progress_fraction
    if fraction is None:
        return format_html('<span class="atp-progress-text">{}</span>', f"{done:g}")
    return format_html(
        '<progress class="atp-progress" value="{}" max="1">{}%</progress> '
        '<span class="atp-progress-text">{}</span>',
        f"{fraction:.3f}", f"{fraction * 100:.0f}", f"{done:g}/{total:g}",
    )


@register.filter
def get_item(mapping, key):
    """Return ``mapping[key]``, or None."""
    return mapping.get(key) if mapping else None


@register.filter
def timestamp(value):
    """Return a datetime as ``2026-11-21 10:25:59.041`` in the current time zone."""
    if value is None:
        return ""
    return timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


@register.filter
def excerpt(text):
    """Return the last line of a failure, cut (``atp.presentation.excerpt``)."""
    return failure_excerpt(text)


@register.filter
def timestamp_zone(value):
    """Return a datetime as ``timestamp`` does, followed by the time zone's name (``UTC``)."""
    if value is None:
        return ""
    return f"{timestamp(value)} {timezone.localtime(value).tzname()}"


@register.filter
def in_zone(value, zone=None):
    """Return a datetime to the second with its time zone's name, in the time zone named
    ``zone`` (empty: UTC; none given: the current one)."""
    return seconds_in_zone(value, zone)


@register.filter
def age(value, now=None):
    """Return how long ago ``value`` was, shortly: ``1.2 s``, ``3 min 4 s``."""
    if value is None:
        return ""
    # ``value`` comes from the database clock, ``now`` from this host's: never below 0.
    return format_duration(max((now or timezone.now()) - value, datetime.timedelta(0)))


@register.simple_tag
def chart_points(chart):
    """Return the points of a chart (``atp.charts``) as SVG: a band each, its figures in
    ``data-`` attributes and said in its ``<title>``. Written here rather than in a
    template loop: a day's charts have hundreds of them, refreshed every few seconds."""
    return format_html_join("", '<rect class="atp-point" x="{}" y="{}" width="{}" height="{}"{}><title>{}</title></rect>', (
        (point.x, chart.top, point.width, chart.plot_height,
         format_html_join("", ' data-{}="{}"', point.data), point.title)
        for point in chart.points))
