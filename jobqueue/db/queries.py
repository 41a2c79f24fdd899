"""Loads the SQL that jobqueue runs: named query blocks from ``sql/queries/*.sql`` and migration scripts.

Every runtime query lives in one readable file per entity as blocks headed ``-- name: <name>``
(Procrastinate's convention); this module turns them into ``{name: text}`` once, at first use.
Nothing here builds SQL from values: parameters are always bound by psycopg.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from jobqueue.db.paths import resource_dir

_NAME_LINE = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def parse_named_queries(text: str) -> dict[str, str]:
    """Split a file into its ``-- name:`` blocks; a repeated name is a mistake worth failing on."""
    queries: dict[str, str] = {}
    matches = list(_NAME_LINE.finditer(text))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        name = match.group(1)
        if name in queries:
            raise ValueError(f"duplicate SQL query name {name!r}")
        queries[name] = text[match.end() : end].strip().rstrip(";")
    return queries


@functools.cache
def queries() -> dict[str, str]:
    loaded: dict[str, str] = {}
    for path in sorted((resource_dir("sql") / "queries").glob("*.sql")):
        for name, text in parse_named_queries(path.read_text()).items():
            if name in loaded:
                raise ValueError(f"SQL query {name!r} is defined twice ({path.name})")
            loaded[name] = text
    return loaded


def query(name: str) -> str:
    return queries()[name]


@functools.cache
def queries_in(path: Path) -> dict[str, str]:
    """The named blocks of one file of a room's own, outside ``sql/queries/`` (`jobqueue.db.gateway.FileCall`)."""
    return parse_named_queries(path.read_text())


def read_migration(filename: str) -> str:
    return (resource_dir("sql") / "migrations" / filename).read_text()


def run_migration_script(op, filename: str) -> None:
    """Run a whole migration script on Alembic's connection without parameter parsing.

    The scripts contain ``%`` (format()) and ``:=``; passing them through SQLAlchemy's text() would
    treat those as placeholders, so they go straight to psycopg, which runs a parameterless
    multi-statement string as one simple query inside Alembic's transaction.
    """
    script = read_migration(filename)
    if script.strip() and not all(line.startswith("--") for line in script.strip().splitlines()):
        op.get_bind().connection.driver_connection.execute(script)
