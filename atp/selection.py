"""Which tasks an operator means: the filter of atp's task list and of its bulk actions,
and the search of the task lists (atp's and the admin's).

Each part of a filter reads an index, or a bounded number of rows, so that it stays fast
with millions of tasks: the type and the state read the (type, ...) indexes, the time
range the creation index, an identifier prefix the identifier index (as a range), and
a word of the failure text only the latest ``ERROR_SEARCH_ENTRIES`` history entries.
"""

from dataclasses import dataclass, fields

from django.db.models import Max, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from atp.converters import parse_task_id
from atp.models import LogRecord, Type
from atp.states import Status

#: How many of the latest history entries a search of the failure text reads: about the
#: latest 10,000 to 15,000 tasks. Older failures are not found by their text.
ERROR_SEARCH_ENTRIES = 50_000
#: The longest search term (a longer one finds nothing an identifier prefix could).
SEARCH_MAX_CHARS = 500
#: Above every character an identifier holds (letters, digits, ``_``, ``-``, ``:``): the
#: end of the identifier index's range that holds those beginning with a prefix.
_AFTER_EVERY_PREFIXED = "\uffff"


class BadFilter(ValueError):
    """A filter of the task list is not valid (its message says which and why)."""


@dataclass(frozen=True)
class TaskFilter:
    """A filter of the task list, as its form gives it: each field a text, empty for any."""

    #: The exact identifier of a type.
    type: str = ""
    #: A state (``FAILED``...).
    status: str = ""
    #: A task number, an identifier's beginning, or a type's identifier.
    q: str = ""
    #: A word of the failure text (case-insensitive).
    error: str = ""
    #: Created at or after, and before, these local times (``2026-11-26T07:30``).
    since: str = ""
    until: str = ""

    @classmethod
    def from_query(cls, data):
        """Return the filter a form sent (a ``QueryDict``); raise ``BadFilter``."""
        chosen = cls(**{name: data.get(name, "").strip() for name in cls.names()})
        for name in cls.names():
            value = getattr(chosen, name)
            if "\x00" in value:  # PostgreSQL refuses NUL in any string
                raise BadFilter(f"{name} holds a NUL character")
            if len(value) > SEARCH_MAX_CHARS:
                raise BadFilter(f"{name} is longer than {SEARCH_MAX_CHARS} characters")
        if chosen.status and chosen.status not in Status.values:
            raise BadFilter(f"unknown state {chosen.status!r}")
        chosen.created_range()  # raises for a bad time
        return chosen

    @classmethod
    def names(cls):
        return [field.name for field in fields(cls)]

    def as_query(self):
        """Return the fields that filter, for links and hidden fields."""
        return {name: getattr(self, name) for name in self.names() if getattr(self, name)}

    def created_range(self):
        """Return the (since, until) aware datetimes, None where not given; raise ``BadFilter``."""
        return _moment(self.since, "since"), _moment(self.until, "until")

    def describe(self):
        """Return the filter in words, for the confirmation of a bulk action."""
        words = {"type": "type", "status": "state", "q": "matching", "error": "failure text with",
                 "since": "created from", "until": "created before"}
        parts = [f"{words[name]} {value!r}" for name, value in self.as_query().items()]
        return ", ".join(parts) or "no filter: every task"

    def apply(self, tasks):
        """Return ``tasks`` (a queryset of ``Instance``) narrowed to this filter."""
        if self.type:
            tasks = tasks.filter(type__in=Type.objects.filter(identifier=self.type))
        if self.status:
            tasks = tasks.filter(status=self.status)
        since, until = self.created_range()
        if since is not None:
            tasks = tasks.filter(created__gte=since)
        if until is not None:
            tasks = tasks.filter(created__lt=until)
        if self.q:
            tasks = search(tasks, self.q)
        if self.error:
            tasks = tasks.filter(pk__in=failed_with(self.error))
        return tasks


def _moment(text, name):
    if not text:
        return None
    try:
        moment = parse_datetime(text)
    except ValueError:
        moment = None
    if moment is None:
        raise BadFilter(f"{name} is not a date and time such as 2026-11-26T07:30")
    if timezone.is_naive(moment):
        try:
            moment = timezone.make_aware(moment)
        except (ValueError, OverflowError) as exc:  # a time that does not exist here
            raise BadFilter(f"{name}: {exc}") from None
    return moment


def search(tasks, term):
    """Return the tasks of ``tasks`` whose number is ``term``, whose identifier begins with
    it, or whose type is named ``term``; none for a term no identifier can hold."""
    term = term.strip()
    if not term:
        return tasks
    if "\x00" in term or len(term) > SEARCH_MAX_CHARS:
        return tasks.none()
    # A range of the identifier index; ``startswith`` keeps only true prefixes where the
    # database's collation orders case or punctuation its own way.
    match = Q(identifier__gte=term, identifier__lt=term + _AFTER_EVERY_PREFIXED,
              identifier__startswith=term)
    number = parse_task_id(term)
    if number is not None:
        match |= Q(pk=number)
    type_ids = list(Type.objects.filter(identifier=term).values_list("pk", flat=True))
    if type_ids:
        match |= Q(type_id__in=type_ids)
    return tasks.filter(match)


def failed_with(word):
    """Return a query of the tasks whose failure (a FAILED entry of their history, among the
    latest ``ERROR_SEARCH_ENTRIES``) holds ``word``, whatever its case."""
    latest = LogRecord.objects.aggregate(latest=Max("pk"))["latest"] or 0
    return LogRecord.objects.filter(
        pk__gt=latest - ERROR_SEARCH_ENTRIES, status=Status.FAILED, message__icontains=word,
    ).values("instance_id")

