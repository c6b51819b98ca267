"""A module nothing imports: a task's row naming it must not make atp import it.

Imported anyway, it leaves the file ``ATP_TEST_IMPORT_MARK`` names, in any process."""

import os
from pathlib import Path

from atp.djangotasks.compat import framework

if os.environ.get("ATP_TEST_IMPORT_MARK"):
    Path(os.environ["ATP_TEST_IMPORT_MARK"]).write_text(str(os.getpid()))


@framework.task()
def boom():
    return "ran"
