#!/usr/bin/env python
"""Run administrative tasks of the django-atp demo project."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "atp_demo.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
