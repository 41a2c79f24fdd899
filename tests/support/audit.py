"""Reading the audit log in tests: its newest seq, and what was recorded after a seq — as the
superuser, through the psql view."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row


def last_seq(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT last_seq FROM jobqueue.audit_chain").fetchone()[0]


def entries_after(conn: psycopg.Connection, seq: int) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT * FROM jobqueue.audit_trail WHERE seq > %s ORDER BY seq", (seq,)).fetchall()
