"""``manage.py atp``, the operator's command line: what each subcommand reads, does and
reports, apart from the command's options (``atp.management.commands.atp``).

Each subcommand returns a ``Report``: one JSON-ready document with stable keys, the
lines a person reads, and whether something was refused or found wrong. An argument
only the database can refuse (an unknown type or task) raises ``report.bad_argument``
before anything is changed, as argparse refuses the others (exit 2).
"""
