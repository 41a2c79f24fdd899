"""Notifications are hints: the helpers that keep a flood of them cheap (jobqueue.events.notifier), the
strict decoding of job-event payloads and the rule that decides which claimed events a job's row
bears out (jobqueue.events.hub)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import uuid
from datetime import datetime, timezone

import pytest

from jobqueue.events.hub import confirms, decode
from jobqueue.events.notifier import Coalescer, LogLimit, Throttled
from jobqueue.store.events import EventRow


def test_a_coalescer_fires_the_first_hint_at_once_and_merges_the_rest_of_its_gap():
    async def scenario() -> list[tuple[float, str]]:
        loop = asyncio.get_running_loop()
        fired: list[tuple[float, str]] = []
        hint = Coalescer(0.05, lambda payload: fired.append((loop.time(), payload)))
        hint("a")
        assert [payload for _, payload in fired] == ["a"]  # synchronously: no delay for the first
        for payload in ("b", "c", "d"):
            hint(payload)
        assert len(fired) == 1
        while len(fired) < 2:
            await asyncio.sleep(0.01)
        await asyncio.sleep(fired[1][0] + 0.06 - loop.time())  # a quiet gap after the trailing call
        hint("e")
        assert len(fired) == 3  # at once again
        return fired

    fired = asyncio.run(scenario())
    assert [payload for _, payload in fired] == ["a", "d", "e"]  # one trailing call, with the last payload
    assert fired[1][0] - fired[0][0] >= 0.049  # not before the gap was over


def test_a_coalescer_with_a_burst_fires_that_many_at_once_then_one_per_gap():
    """A breaker opening right after a worker's start declared its job types is two real changes
    within one gap: with burst=1 the second waited the whole gap (the acceptance test's workers
    claimed a dead dependency's jobs meanwhile). A flood still costs one call per gap."""

    async def scenario() -> tuple[list[tuple[float, str]], float]:
        loop = asyncio.get_running_loop()
        fired: list[tuple[float, str]] = []
        hint = Coalescer(0.05, lambda payload: fired.append((loop.time(), payload)), burst=3)
        start = loop.time()
        for payload in ("a", "b", "c"):
            hint(payload)
        assert [payload for _, payload in fired] == ["a", "b", "c"]  # all three synchronously
        while loop.time() - start < 0.5:  # a flood: one trailing call per gap, with the last payload
            hint("flood")
            await asyncio.sleep(0.002)
        return fired, loop.time() - start

    fired, lasted = asyncio.run(scenario())
    flood = [at for at, payload in fired if payload == "flood"]
    # the bucket refills at one call per gap whatever the loop's lateness: the rate is the bound
    # (two calls may come closer than a gap when the first of them was itself late)
    assert 1 <= len(flood) <= lasted / 0.05 + 1, len(flood)


def test_throttled_with_a_burst_runs_at_once_that_many_times():
    """The gap is long (60 s) so that no slowness of a loaded machine can refill the bucket
    between the requests: three run at once, the fourth waits for the budget."""

    async def scenario() -> tuple[int, int]:
        runs: list[int] = []

        async def action() -> None:
            runs.append(len(runs))

        throttled = Throttled(action, gap=60.0, name="test", burst=3)
        for _ in range(3):
            throttled.request()
            while throttled._wanted or (throttled._task is not None and not throttled._task.done()):
                await asyncio.sleep(0.001)
        at_once = len(runs)
        throttled.request()
        for _ in range(50):
            await asyncio.sleep(0.002)
        waiting = len(runs)
        throttled.cancel()
        return at_once, waiting

    assert asyncio.run(scenario()) == (3, 3)


def test_a_coalescer_by_payload_keeps_keys_apart_and_forgets_them():
    async def scenario() -> tuple[list[str], int]:
        fired: list[str] = []
        hint = Coalescer(0.01, fired.append, by_payload=True)
        for payload in ("q1", "q2", "q1", "q2"):
            hint(payload)
        await asyncio.sleep(0.03)
        for i in range(1000):  # a flood of distinct payloads keeps no more than a gap's worth
            hint(f"x{i}")
            if i % 100 == 0:
                await asyncio.sleep(0.015)
        return fired, len(hint._last)

    fired, kept = asyncio.run(scenario())
    assert fired[:4] == ["q1", "q2", "q1", "q2"]  # each key's first at once, each key's repeat trailing
    assert kept <= 300


def test_throttled_never_runs_twice_at_once_and_runs_once_more_when_asked_meanwhile():
    async def scenario() -> tuple[int, int]:
        running = most = runs = 0
        release = asyncio.Event()

        async def action() -> None:
            nonlocal running, most, runs
            running += 1
            runs += 1
            most = max(most, running)
            await release.wait()
            running -= 1

        throttled = Throttled(action, gap=0.01, name="test")
        throttled.request()
        await asyncio.sleep(0.01)
        for _ in range(50):  # while the first run is held: all of them make one more run
            throttled.request()
            await asyncio.sleep(0)
        assert runs == 1
        release.set()
        while throttled._task is not None and not throttled._task.done():
            await asyncio.sleep(0.01)
        return runs, most

    assert asyncio.run(scenario()) == (2, 1)


def test_throttled_logs_a_failing_action_and_runs_it_again_on_the_next_request(caplog):
    async def scenario() -> int:
        calls = 0

        async def action() -> None:
            nonlocal calls
            calls += 1
            raise RuntimeError("boom")

        throttled = Throttled(action, gap=0.0, name="failing")
        for _ in range(3):
            throttled.request()
            await asyncio.sleep(0.01)
        return calls

    with caplog.at_level(logging.ERROR, logger="jobqueue.notifier"):
        assert asyncio.run(scenario()) == 3
    assert len([r for r in caplog.records if "failing failed" in r.getMessage()]) == 1  # rate-limited


def test_a_log_limit_says_how_much_it_left_out(caplog):
    limit = LogLimit(logging.getLogger("jobqueue.test"), every=0.0)
    quiet = LogLimit(logging.getLogger("jobqueue.test"), every=3600.0)
    with caplog.at_level(logging.WARNING, logger="jobqueue.test"):
        for _ in range(5):
            quiet.log(logging.WARNING, "bad %s", "thing")
        limit.log(logging.WARNING, "one")
    assert [r.getMessage() for r in caplog.records] == ["bad thing", "one"]
    assert quiet.suppressed == 4


# --- decoding and confirming job events -------------------------------------------------------------


def _code(job_id: uuid.UUID) -> str:
    return base64.b64encode(job_id.bytes).decode().rstrip("=")


def test_decode_takes_only_the_six_job_events_with_typed_fields():
    a, b = uuid.uuid4(), uuid.uuid4()
    good = json.dumps([["job.started", "q", "p", _code(a) + _code(b)], ["job.queued", None, None, _code(a)]])
    assert [(e.event, e.job_id, e.queue, e.producer_id) for e in decode(good, 1.0)] == [
        ("job.started", a, "q", "p"),
        ("job.started", b, "q", "p"),
        ("job.queued", a, None, None),
    ]
    for bad in (5, "stream.revoked", "job.nope", ["job.queued"], None):
        assert decode(json.dumps([[bad, "q", None, _code(a)]]), 1.0) == []
    for queue, producer, codes in (
        (["q"], None, _code(a)),
        ("q", {}, _code(a)),
        ("q", None, 7),
        ("q", None, _code(a)[:-1]),
        ("q", None, "%" * 22),
        ("q", None, ""),
    ):
        assert decode(json.dumps([["job.queued", queue, producer, codes]]), 1.0) == []
    assert decode("[" * 3900 + "]" * 3900, 1.0) == []  # nested too deep for json: no RecursionError
    assert decode(json.dumps([["job.queued", "q", None, _code(a)], [1, 2]]), 1.0)[0].job_id == a  # the good piece stays


def test_decode_complains_once_per_notification_through_its_log_limit(caplog):
    limit = LogLimit(logging.getLogger("jobqueue.events"), every=3600.0)
    with caplog.at_level(logging.WARNING, logger="jobqueue.events"):
        for _ in range(100):
            decode(json.dumps([[1, 2, 3, 4]] * 50), 1.0, complaints=limit)
    assert len(caplog.records) == 1 and limit.suppressed == 99


def _row(state: str, attempts: int, *, recent: bool = True) -> EventRow:
    return EventRow(state, attempts, "q", "p", datetime.now(timezone.utc), recent)


@pytest.mark.parametrize(
    "event, state, attempts, recent, expected",
    [
        # the state the event announces
        ("job.queued", "pending", 0, False, True),  # a pending job is queued, however old
        ("job.started", "processing", 1, True, True),
        ("job.started", "processing", 1, False, False),  # a replay of an old start
        ("job.completed", "completed", 1, True, True),
        ("job.completed", "completed", 1, False, False),
        ("job.cancelled", "cancelled", 0, True, True),
        ("job.dead_letter", "dead_letter", 0, True, True),  # expired before its first attempt
        ("job.failed", "failed", 1, True, True),
        ("job.failed", "pending", 1, True, True),  # a lost lease: back to pending
        # forged: the row says otherwise
        ("job.completed", "pending", 0, True, False),
        ("job.cancelled", "processing", 1, True, False),
        ("job.dead_letter", "completed", 1, True, False),
        ("job.started", "pending", 0, True, False),
        ("job.failed", "pending", 0, True, False),
        ("job.failed", "processing", 1, True, False),  # the first attempt runs: nothing failed yet
        ("job.failed", "completed", 1, True, False),  # completed at the first attempt
        # moved on within milliseconds: the event is still true
        ("job.queued", "completed", 1, True, True),
        ("job.queued", "completed", 1, False, False),
        ("job.started", "completed", 1, True, True),
        ("job.started", "failed", 1, True, True),
        ("job.failed", "processing", 2, True, True),  # the retry has started
        ("job.failed", "completed", 2, True, True),
        ("job.failed", "dead_letter", 1, True, True),
        # progress: a running job's, however long ago it started (a progress write keeps updated_at)
        ("job.progress", "processing", 1, False, True),
        ("job.progress", "pending", 0, True, False),  # forged: nothing runs
        ("job.progress", "completed", 1, True, False),  # finished: its state says more now
        ("job.queued", "waiting", 0, True, True),  # enqueued behind its ordering key
    ],
)
def test_confirms_what_the_row_bears_out(event, state, attempts, recent, expected):
    assert confirms(event, _row(state, attempts, recent=recent)) is expected
