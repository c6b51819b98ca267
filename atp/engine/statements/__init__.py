"""The SQL of the engines that write their own: one file per engine, each statement named
and whole, as it runs (``postgresql.sql``, ``sqlite.sql``).

A file is a series of blocks, each opened by a line ``-- name: <name>`` and holding one
statement that ends with ``;``. Whole-line comments (``--``) say why a statement is as
it is, next to it; they stay in the file. ``load`` reads a file once and returns its
statements by name, each as it is written less its comment lines, blank lines and final
``;``: nothing is added or rewritten when a verb runs. Placeholders are the driver's
(``%(name)s``, ``%s``; PostgreSQL's arrays are sent binary, ``%(name)b``: psycopg dumps a
list as text in Python, five times slower), and a ``%`` of SQL itself is written ``%%``.
``numbered`` turns a statement's placeholders into PostgreSQL's own (``$1``), once.
"""

import functools
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAME_LINE = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
#: A ``%`` and what follows it: a placeholder of the driver's (``%(name)s``, ``%s``; ``b``
#: and ``t`` as for ``s``), a ``%%``, or (``other``) a mistake.
PERCENT = re.compile(r"%(?:(?P<percent>%)|\((?P<name>\w+)\)(?P<named>[sbt])|(?P<format>[sbt])"
                     r"|(?P<other>\(.*?\).|.|$))", re.DOTALL)


class StatementsFileError(ValueError):
    """A file of statements is malformed."""


@functools.cache
def load(engine):
    """Return ``{name: statement}`` of ``<engine>.sql``; raise ``StatementsFileError`` for a
    block without exactly one statement, or a name given twice."""
    return parse(HERE.joinpath(f"{engine}.sql").read_text(encoding="utf-8"), f"{engine}.sql")


def parse(text, source="<text>"):
    """Return ``{name: statement}`` of the blocks of ``text`` (see the module)."""
    parts = NAME_LINE.split(text)
    found = {}
    for name, block in zip(parts[1::2], parts[2::2], strict=True):
        lines = [line.rstrip() for line in block.splitlines()]
        sql = "\n".join(line for line in lines if line and not line.lstrip().startswith("--"))
        if not sql.endswith(";") or ";" in sql[:-1]:
            raise StatementsFileError(f"{source}: {name!r} must hold one statement ending in ';'")
        if name in found:
            raise StatementsFileError(f"{source}: {name!r} is named twice")
        found[name] = sql[:-1]
    return found


@functools.lru_cache(maxsize=256)
def numbered(sql):
    """Return ``(sql with $1, $2... for its placeholders, their names in that order)``:
    a name used twice is one parameter; the names are None where the placeholders are
    positional (``%s``), empty where there are none. ``%%`` becomes ``%``. Raise
    ``ValueError`` for what the driver refuses too: placeholders named and positional
    in one statement, a name given two formats, a ``%`` that is neither.

    PostgreSQL's own placeholders go to the server as written: psycopg reads the
    driver's anew at every run of a statement over 4 KiB (it caches only shorter ones),
    which the longest claims are."""
    names, formats, positional = [], {}, 0

    def number(match):
        nonlocal positional
        if match["percent"]:
            return "%"
        if match["other"] is not None:
            raise ValueError(f"{match[0]!r} is no placeholder (a % of SQL itself is %%)")
        if match["format"]:
            positional += 1
            return f"${positional}"
        name = match["name"]
        if formats.setdefault(name, match["named"]) != match["named"]:
            raise ValueError(f"placeholder {name!r} is given two formats")
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    text = PERCENT.sub(number, sql)
    if names and positional:
        raise ValueError("a statement's placeholders are all named or all positional")
    return text, (None if positional else tuple(names))
