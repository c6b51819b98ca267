"""Task numbers in URLs and query strings: digits that fit the id column, or nothing."""

#: A task id is a positive 64-bit integer; 18 digits always fit, and more never occur.
TASK_ID_PATTERN = "[0-9]{1,18}"


class TaskIdConverter:
    """``<atp_task_id:pk>``: like ``<int:pk>``, but a number too large to be a task is a 404."""

    regex = TASK_ID_PATTERN

    def to_python(self, value):
        return int(value)

    def to_url(self, value):
        return str(int(value))


def parse_task_id(value):
    """Return ``value`` as a task number, or ``None`` if it cannot be one.

    Only ASCII digits count (``"²".isdigit()`` is true), and at most 18 of them.
    """
    value = value.strip()
    if value.isascii() and value.isdigit() and len(value) <= 18:
        return int(value)
    return None
