"""One LISTEN connection per process, dispatching notifications by channel to callbacks.

Channels jobqueue uses: ``jobqueue_jobs`` (payload: queue name; new or returned runnable work),
``jobqueue_cancel`` (payload: job id; a running job was asked to stop), ``jobqueue_leader``
(payload: role name; a leader resigned). When the connection drops, the notifier reconnects with
backoff and calls the ``on_reconnect`` callbacks, because anything sent meanwhile was missed; the
worker's poll interval covers the gap, so LISTEN is an accelerator, never a requirement.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Callable

import psycopg
from psycopg import sql as pgsql

log = logging.getLogger("jobqueue.notifier")

Callback = Callable[[str], None]


class Notifier:
    def __init__(self, dsn: str, *, reconnect_delay: float = 0.5, max_reconnect_delay: float = 5.0) -> None:
        self.dsn = dsn
        self._callbacks: dict[str, list[Callback]] = defaultdict(list)
        self._on_reconnect: list[Callable[[], None]] = []
        self.connected = asyncio.Event()
        self._reconnect_delay = reconnect_delay
        self._max_reconnect_delay = max_reconnect_delay
        self._conn: psycopg.AsyncConnection | None = None

    def subscribe(self, channel: str, callback: Callback) -> None:
        """Register before `run()` starts: channels are LISTENed to when the connection opens."""
        if self._conn is not None and channel not in self._callbacks:
            raise RuntimeError(f"subscribe to {channel!r} before the notifier connects")
        self._callbacks[channel].append(callback)

    def on_reconnect(self, callback: Callable[[], None]) -> None:
        self._on_reconnect.append(callback)

    async def run(self) -> None:
        """Listen until cancelled, reconnecting whenever the connection is lost."""
        delay = self._reconnect_delay
        first = True
        while True:
            try:
                self._conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
                for channel in self._callbacks:
                    await self._conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(channel)))
                self.connected.set()
                if not first:
                    log.info("notifier reconnected")
                    for reconnected in self._on_reconnect:
                        reconnected()
                first = False
                delay = self._reconnect_delay
                async for notification in self._conn.notifies():
                    for callback in self._callbacks.get(notification.channel, ()):
                        try:
                            callback(notification.payload)
                        except Exception:  # a bad callback must not stop the listener
                            log.exception("notification callback failed")
            except asyncio.CancelledError:
                raise
            except (psycopg.Error, OSError) as exc:
                self.connected.clear()
                log.warning("notifier connection lost (%s); retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._max_reconnect_delay)
            finally:
                self.connected.clear()
                if self._conn is not None:
                    conn, self._conn = self._conn, None
                    try:
                        await conn.close()
                    except Exception:
                        pass
