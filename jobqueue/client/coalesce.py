"""Group commit for concurrent submissions: requests that arrive while the database is busy with
earlier ones are sent together, as one `enqueue_many` statement and one commit.

Why: a one-job enqueue costs PostgreSQL about 0.3 ms of CPU, nearly all of it per statement
(planning, triggers, the commit's WAL flush); each further job in the same statement adds about
0.02 ms. A server taking many small submissions at once (the REST API) therefore spends most of
its database time on statement overhead, and when something stalls it for a moment the backlog it
must work off is made of such statements. Coalescing turns that backlog into a few statements.

How: at most ``lanes`` statements are in flight. A submission that finds a free lane and nobody
waiting runs at once, alone: an idle server adds no delay. Otherwise it waits, and when a lane
frees, everything waiting (up to ``max_jobs``) goes in one statement. Each caller still gets its
own answer after the commit: its ids in order, its own error.

A statement that has been in flight for ``stall_after`` seconds stops holding its lane: one
submission waiting on a lock (another transaction holding its idempotency key) or a very large
batch must not stop everybody else's. A caller still waiting for a lane after ``max_wait`` seconds
gets `DatabaseUnavailable` (a 503 from the API) without anything written; once its jobs are in a
statement, it waits for that statement's outcome.

All or nothing stays per caller: if the database refuses the combined statement (a job it will
not take, a deadlock), nothing was written, and each caller's jobs run again on their own, so only
the caller whose job was refused sees the error. A statement of several callers is told it is
grouped, so the runner can bound its lock waits: one caller's key held by another transaction
then fails the group in a fraction of a second, and only that caller waits, alone. A lost connection or an unreachable
database
fails every caller of the statement with `DatabaseUnavailable`, as a lone statement would.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from typing import Any, Awaitable, Callable, Sequence

from jobqueue.model.errors import DatabaseBusy, DatabaseUnavailable, NotMigrated

Results = list[tuple[uuid.UUID, bool]]
#: Runs one statement for the given jobs (grouped: several callers' jobs) and returns (id, created)
#: per job, in order.
Runner = Callable[[Sequence[Any], bool], Awaitable[Results]]


class _Waiting:
    __slots__ = ("jobs", "future", "taken")

    def __init__(self, jobs: Sequence[object], future: asyncio.Future[Results]) -> None:
        self.jobs = jobs
        self.future = future
        self.taken = False  # in a statement: its outcome decides, not a deadline


class SubmitCoalescer:
    def __init__(
        self, run: Runner, *, lanes: int, max_jobs: int, max_wait: float = 2.0, stall_after: float = 0.1
    ) -> None:
        if lanes < 1 or max_jobs < 1 or max_wait <= 0 or stall_after <= 0:
            raise ValueError("lanes and max_jobs must be at least 1, max_wait and stall_after positive")
        self._run = run
        self._lanes = lanes
        self._max_jobs = max_jobs
        self._max_wait = max_wait
        self._stall_after = stall_after
        self._started: dict[object, float] = {}  # statements in flight: token -> monotonic start
        self._waiting: deque[_Waiting] = deque()
        self._flushes: set[asyncio.Task] = set()
        self._recheck: asyncio.TimerHandle | None = None
        #: statements sent and jobs they carried (the share of coalesced work shows in their ratio)
        self.statements = 0
        self.jobs = 0

    async def submit(self, jobs: Sequence[object]) -> Results:
        if not self._waiting and self._busy_lanes() < self._lanes:
            token = self._occupy()
            try:
                return await self._statement(jobs)
            finally:
                self._release(token)
        loop = asyncio.get_running_loop()
        entry = _Waiting(jobs, loop.create_future())
        self._waiting.append(entry)
        self._start_flushes()
        # A timer instead of wait_for + shield (a task, two futures and their callbacks for each
        # waiting caller): when it fires, a caller not yet taken into a statement is given up;
        # one already taken waits for its statement's outcome. A caller cancelled meanwhile (its
        # HTTP connection closed) cancels its future, and an untaken one is then dropped unsent.
        timer = loop.call_later(self._max_wait, self._give_up, entry)
        try:
            return await entry.future
        finally:
            timer.cancel()

    def _give_up(self, entry: _Waiting) -> None:
        if entry.taken or entry.future.done():
            return
        self._waiting.remove(entry)
        entry.future.set_exception(
            DatabaseUnavailable(
                f"database unavailable: no submission went through for {self._max_wait:g} s; nothing was written"
            )
        )

    # --- lanes ----------------------------------------------------------------------------------

    def _busy_lanes(self) -> int:
        now = time.monotonic()
        return sum(1 for started in self._started.values() if now - started < self._stall_after)

    def _occupy(self) -> object:
        token = object()
        self._started[token] = time.monotonic()
        return token

    def _release(self, token: object) -> None:
        del self._started[token]
        self._start_flushes()

    def _start_flushes(self) -> None:
        while self._waiting and self._busy_lanes() < self._lanes:
            group = self._take_group()
            if not group:
                return
            token = self._occupy()
            task = asyncio.create_task(self._flush(group, token), name="jobqueue-submit-flush")
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)
        if self._waiting and self._started and self._recheck is None:
            # Lanes are full: look again when the oldest statement in flight counts as stalled.
            oldest = min(self._started.values())
            delay = max(0.0, oldest + self._stall_after - time.monotonic()) + 0.001
            self._recheck = asyncio.get_running_loop().call_later(delay, self._on_recheck)

    def _on_recheck(self) -> None:
        self._recheck = None
        self._start_flushes()

    def _take_group(self) -> list[_Waiting]:
        """The oldest waiting callers, as many as fit in ``max_jobs`` (at least one); callers that
        gave up (a closed HTTP connection cancels its request) are dropped unsent."""
        group: list[_Waiting] = []
        size = 0
        while self._waiting:
            entry = self._waiting[0]
            if entry.future.done():
                self._waiting.popleft()
                continue
            if group and size + len(entry.jobs) > self._max_jobs:
                break
            entry.taken = True
            group.append(self._waiting.popleft())
            size += len(entry.jobs)
        return group

    # --- statements -----------------------------------------------------------------------------

    async def _statement(self, jobs: Sequence[object], grouped: bool = False) -> Results:
        self.statements += 1
        self.jobs += len(jobs)
        results = await self._run(jobs, grouped)
        if len(results) != len(jobs):  # the answers are sliced per caller by position
            raise RuntimeError(f"enqueue_many answered {len(results)} rows for {len(jobs)} jobs")
        return results

    async def _flush(self, group: list[_Waiting], token: object) -> None:
        try:
            await self._send(group)
        finally:
            for entry in group:  # interrupted (the client is closing): nobody may wait forever
                _settle(
                    entry,
                    exception=DatabaseUnavailable(
                        "the submission was interrupted before its statement finished; resubmit with the same "
                        "idempotency key to be sure"
                    ),
                )
            self._release(token)

    async def _send(self, group: list[_Waiting]) -> None:
        jobs = [job for entry in group for job in entry.jobs]
        try:
            results = await self._statement(jobs, grouped=len(group) > 1)
        except Exception as exc:
            if len(group) == 1 or is_outage(exc):
                for entry in group:
                    _settle(entry, exception=exc)
                return
            # Refused as a whole, nothing written: each caller's jobs again, on their own — each
            # answered as soon as its own statement is done, not when the slowest one is.
            await asyncio.gather(*(self._alone(entry) for entry in group))
            return
        start = 0
        for entry in group:
            _settle(entry, result=results[start : start + len(entry.jobs)])
            start += len(entry.jobs)

    async def _alone(self, entry: _Waiting) -> None:
        try:
            _settle(entry, result=await self._statement(entry.jobs))
        except Exception as exc:
            _settle(entry, exception=exc)


def is_outage(exc: BaseException) -> bool:
    """Did the statement fail because the database could not be reached or went away (so retrying
    each caller alone would fail the same), rather than because the server refused it (a
    validation, a deadlock or timeout: `DatabaseBusy`)?"""
    return isinstance(exc, (DatabaseUnavailable, NotMigrated)) and not isinstance(exc, DatabaseBusy)


def _settle(entry: _Waiting, *, result: Results | None = None, exception: BaseException | None = None) -> None:
    if entry.future.done():  # its caller gave up meanwhile; the jobs are committed all the same
        return
    if exception is not None:
        entry.future.set_exception(exception)
    else:
        entry.future.set_result(result)  # type: ignore[arg-type]
