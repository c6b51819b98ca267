"""``python -m tests.djangotasks.probe <result id>``: read a Django task's result in a
process of its own; print ``{"refused", "reason", "imported"}`` as JSON, ``imported``
saying whether ``tests.outside.never_imported`` was imported meanwhile."""

import json
import sys

import django

django.setup()

from atp.djangotasks.compat import TaskResultDoesNotExist, framework  # noqa: E402

try:
    framework.task_backends["default"].get_result(sys.argv[1])
    refused, reason = False, ""
except TaskResultDoesNotExist as exc:
    refused, reason = True, str(exc)
print(json.dumps({"refused": refused, "reason": reason,
                  "imported": "tests.outside.never_imported" in sys.modules}))
