"""The LISTEN/NOTIFY channels Python listens on (`jobqueue.events.channels`) are the ones the SQL
notifies, and no Python outside that module spells one out: a renamed channel in one place only
would leave workers waiting for a notification that never comes (they would still poll, slowly)."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

from jobqueue.events import channels

ROOT = Path(__file__).resolve().parents[2]
NOTIFIES = re.compile(r"pg_notify\(\s*'(\w+)'|\bNOTIFY\s+(jobqueue_\w+)", re.I)


def _notified(text: str) -> set[str]:
    # jobqueue_bench_raw: the benchmark's hand-written baseline queue, not jobqueue's own channel
    return {a or b for a, b in NOTIFIES.findall(text)} - {"jobqueue_bench_raw"}


def test_the_constants_are_the_channels_the_sql_notifies():
    """The runtime queries, and the functions and triggers the migrations leave (schema.sql)."""
    sql = [*sorted((ROOT / "sql" / "queries").glob("*.sql")), ROOT / "sql" / "schema.sql"]
    notified = set().union(*(_notified(path.read_text()) for path in sql))
    assert notified == set(channels.ALL)
    assert len(channels.ALL) == len(set(channels.ALL))


def test_no_python_outside_the_channels_module_names_a_channel():
    spelled = []
    for path in sorted((ROOT / "jobqueue").rglob("*.py")):
        if path == ROOT / "jobqueue" / "events" / "channels.py":
            continue
        for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            if token.type == tokenize.STRING and token.string.strip("'\"") in channels.ALL:
                spelled.append(f"{path.relative_to(ROOT)}:{token.start[0]}")
    assert not spelled, f"use jobqueue.events.channels: {spelled}"
