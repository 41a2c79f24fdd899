"""Forged notifications: what any login that may connect can send on jobqueue's channels."""

from __future__ import annotations

import threading
import time
from typing import Sequence

import psycopg
from psycopg import sql


def _notify(channel: str, payload: str) -> sql.Composed:
    # The NOTIFY statement itself, as an attacker in psql would type it (no function, no privilege).
    return sql.SQL("NOTIFY {}, {}").format(sql.Identifier(channel), sql.Literal(payload))


def notify(dsn: str, channel: str, payload: str, *, times: int = 1) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        statement = _notify(channel, payload)
        for _ in range(times):
            conn.execute(statement)


def flood(
    dsn: str, messages: Sequence[tuple[str, str]], *, seconds: float | None = None, count: int | None = None
) -> int:
    """Send ``messages`` (channel, payload) round and round, one transaction each, from one
    connection, for ``seconds`` or ``count`` times; how many were sent."""
    statements = [_notify(channel, payload) for channel, payload in messages]
    sent = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        end = time.monotonic() + seconds if seconds is not None else None
        while (end is None or time.monotonic() < end) and (count is None or sent < count):
            conn.execute(statements[sent % len(statements)])
            sent += 1
    return sent


class Flooding:
    """`flood` in a thread, for as long as the ``with`` block needs (it ends after ``seconds``):
    ``with Flooding(dsn, messages, seconds=1.0) as attack: ...``, then ``attack.sent``."""

    def __init__(self, dsn: str, messages: Sequence[tuple[str, str]], *, seconds: float) -> None:
        self.sent = 0
        self._thread = threading.Thread(target=self._send, args=(dsn, messages, seconds), daemon=True)

    def _send(self, dsn: str, messages: Sequence[tuple[str, str]], seconds: float) -> None:
        self.sent = flood(dsn, messages, seconds=seconds)

    def __enter__(self) -> "Flooding":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.join()
