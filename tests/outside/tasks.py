"""Task functions outside the installed apps, imported at start-up by ``tests.importing_app``."""

from atp.djangotasks.compat import framework


@framework.task()
def add(a, b):
    return a + b


def plain(a):
    """Not a task function."""
    return a


def _wrapped(a):
    return a


#: A task whose module path (``tests.outside.tasks._wrapped``) names the plain function.
renamed = framework.task()(_wrapped)
