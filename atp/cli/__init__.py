"""``manage.py atp``, the operator's command line: what each subcommand reads, does and
reports, apart from the command's options (``atp.management.commands.atp``).

Each subcommand returns a ``Report``: one JSON-ready document with stable keys, the
lines a person reads, and whether something was refused or found wrong. Bad arguments
raise ``BadArgument`` before anything is changed.
"""
