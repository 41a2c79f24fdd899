"""One LISTEN connection per process, dispatching notifications by channel to callbacks.

Channels jobqueue uses: ``jobqueue_jobs`` (payload: queue name; new or returned runnable work),
``jobqueue_cancel`` (payload: job id; a running job was asked to stop), ``jobqueue_leader``
(payload: role name; a leader resigned). When the connection drops, the notifier reconnects with
backoff and calls the ``on_reconnect`` callbacks, because anything sent meanwhile was missed; the
worker's poll interval covers the gap, so LISTEN is an accelerator, never a requirement.

**A notification is a hint, never a fact.** PostgreSQL lets any login that may connect to the
database ``NOTIFY`` any channel, with any payload, as often as it likes. So a callback treats a
notification as "something may have changed: look in the database", and two helpers here keep a
flood of forged ones cheap: `Coalescer` (a few calls per key at once, then at most one per gap)
and `Throttled` (an async re-read run the same way, never twice at the same time), both on a
`Budget` (a token bucket). `LogLimit` keeps malformed payloads from filling the log: one line per interval, with a
count of what it left out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from typing import Awaitable, Callable

import psycopg
from psycopg import sql as pgsql

log = logging.getLogger("jobqueue.notifier")

Callback = Callable[[str], None]

#: how often a repeated complaint about what arrived on a channel is logged at most (seconds)
LOG_EVERY = 60.0


class LogLimit:
    """One log line per ``every`` seconds at most; the next line says how many it left out. For
    complaints anyone can cause at will (a malformed NOTIFY), which must neither fill the log nor
    cost a traceback each."""

    def __init__(self, logger: logging.Logger, *, every: float = LOG_EVERY) -> None:
        self._log = logger
        self.every = every
        self._last: float | None = None
        self.suppressed = 0

    def log(self, level: int, message: str, *args: object, exc_info: bool = False) -> None:
        now = time.monotonic()
        if self._last is not None and now - self._last < self.every:
            self.suppressed += 1
            return
        if self.suppressed:
            message += " (and %d more like it in the last %.0f s)"
            args = (*args, self.suppressed, now - self._last if self._last is not None else 0.0)
        self._last, self.suppressed = now, 0
        self._log.log(level, message, *args, exc_info=exc_info)


class Budget:
    """A token bucket: ``burst`` calls at once, then one per ``gap`` seconds. Legitimate changes
    come in small bursts (a breaker opening right after a worker's start declared its job types),
    which pass at once; a flood is held to one call per gap."""

    def __init__(self, gap: float, burst: int = 1) -> None:
        self.gap = gap
        self.burst = burst
        self._tokens = float(burst)
        self._at: float | None = None

    def _refill(self, now: float) -> None:
        if self._at is not None and self.gap > 0:
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) / self.gap)
        elif self._at is not None:
            self._tokens = float(self.burst)
        self._at = now

    def take(self, now: float) -> float:
        """0 when a call may go now (and it is counted), else the seconds until one may."""
        self._refill(now)
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) * self.gap

    def spend(self, now: float) -> None:
        """Counts a call the caller makes anyway (a trailing call at the time `take` named): the
        bucket may dip a float's rounding below empty, never lets that call go uncounted."""
        self._refill(now)
        self._tokens -= 1.0

    def full(self, now: float) -> bool:
        """Whether it has recovered its whole burst (it can be forgotten)."""
        self._refill(now)
        return self._tokens >= self.burst


class Coalescer:
    """Calls ``fire(payload)`` at most ``burst`` times at once and then once per ``gap`` seconds per
    key (`Budget`): a hit with budget left fires at once, hits beyond it are merged into one call
    when the budget allows (with the last of their payloads). The key is the payload when
    ``by_payload`` (per queue, per role name), else the channel as a whole (a callback that ignores
    the payload). Keys are forgotten once their budget is whole again, so a flood of distinct
    payloads holds no memory beyond a gap's worth."""

    def __init__(self, gap: float, fire: Callback, *, by_payload: bool = False, burst: int = 1) -> None:
        self.gap = gap
        self.burst = burst
        self._fire = fire
        self._by_payload = by_payload
        self._last: dict[str, Budget] = {}
        self._waiting: dict[str, str] = {}  # key -> the payload its trailing call will carry
        self._prune_above = 64

    def __call__(self, payload: str) -> None:
        key = payload if self._by_payload else ""
        if key in self._waiting:
            self._waiting[key] = payload
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        budget = self._last.get(key)
        if budget is None:
            budget = self._last[key] = Budget(self.gap, self.burst)
            if len(self._last) > self._prune_above:
                self._prune(now)
        wait = budget.take(now)
        if wait == 0.0:
            self._fire(payload)
        else:
            self._waiting[key] = payload
            loop.call_at(now + wait, self._trailing, key)

    def _trailing(self, key: str) -> None:
        payload = self._waiting.pop(key)
        self._last[key].spend(asyncio.get_running_loop().time())
        self._fire(payload)

    def _prune(self, now: float) -> None:
        self._last = {key: budget for key, budget in self._last.items() if key in self._waiting or not budget.full(now)}
        self._prune_above = max(64, 2 * len(self._last))


class Throttled:
    """An async action (a re-read of the database) run on request: at once while its `Budget`
    allows (``burst`` runs, then one per ``gap`` seconds), else when it does; requests made
    meanwhile, or while it runs, make one more run, never a second one at the same time. Failures
    are logged (rate-limited) and the next request runs it again."""

    def __init__(self, action: Callable[[], Awaitable[None]], *, gap: float, name: str, burst: int = 1) -> None:
        self._action = action
        self.gap = gap
        self._name = name
        self._wanted = False
        self._budget = Budget(gap, burst)
        self._task: asyncio.Task | None = None
        self._failures = LogLimit(log)

    def request(self, _payload: str = "") -> None:
        self._wanted = True
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain(), name=self._name)

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._wanted:
            wait = self._budget.take(loop.time())
            if wait > 0.0:
                await asyncio.sleep(wait)
                continue
            self._wanted = False
            try:
                await self._action()
            except Exception:
                self._failures.log(logging.ERROR, "%s failed", self._name, exc_info=True)

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()


class Notifier:
    def __init__(self, dsn: str, *, reconnect_delay: float = 0.5, max_reconnect_delay: float = 5.0) -> None:
        self.dsn = dsn
        self._callbacks: dict[str, list[Callback]] = defaultdict(list)
        self._on_reconnect: list[Callable[[], None]] = []
        self.connected = asyncio.Event()
        self._reconnect_delay = reconnect_delay
        self._max_reconnect_delay = max_reconnect_delay
        self._conn: psycopg.AsyncConnection | None = None
        self._failures = LogLimit(log)

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
                        except Exception:  # a bad callback must not stop the listener, nor a flood fill the log
                            self._failures.log(
                                logging.ERROR,
                                "callback of %s failed on a notification",
                                notification.channel,
                                exc_info=True,
                            )
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
