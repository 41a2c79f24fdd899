"""A handler's result that is, or directly holds, a string longer than JOBQUEUE_MAX_RESULT_BYTES is
refused before it is encoded: encoding a 256 MB string held the event loop for seconds, and under
load every job of that worker lost its lease (the fault campaign's poison scenario). Anything else
is left to the encoder, whose exact length decides."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timezone

import pytest

from jobqueue.model.jobs import Job
from jobqueue.worker import executor
from jobqueue.worker.executor import COMPLETED, DEAD, SIZE_PROBE_ITEMS, _completed, _oversized_string

LIMIT = 1000


def _job() -> Job:
    return Job(
        id=uuid.uuid4(),
        queue="q",
        job_type="t",
        payload={},
        priority=2,
        attempt=1,
        max_attempts=3,
        traceparent=None,
        cancel_requested=False,
        created_at=datetime.now(timezone.utc),
    )


@pytest.mark.parametrize(
    "value, length",
    [
        ("x" * (LIMIT + 1), LIMIT + 1),
        (b"x" * (LIMIT + 5), LIMIT + 5),
        ({"a": 1, "blob": "x" * 2000}, 2000),
        (["ok", "y" * 3000], 3000),
        (("z" * 1001,), 1001),
        ("x" * LIMIT, 0),
        ({"a": "b" * LIMIT}, 0),
        (7, 0),
        (None, 0),
        ({"deep": {"blob": "x" * 5000}}, 0),
        ([*(["s"] * SIZE_PROBE_ITEMS), "x" * 5000], 0),  # past the items it looks at
    ],
)
def test_the_probe_finds_an_oversized_string_at_the_top_of_the_result_only(value, length):
    assert _oversized_string(value, LIMIT) == length


def test_a_huge_string_result_is_refused_without_being_encoded(monkeypatch):
    def never(_value):
        raise AssertionError("the huge result was encoded")

    monkeypatch.setattr(executor, "dumps", never)
    outcome = _completed(
        _job(), {"attempt": 1, "blob": "x" * (2**28)}, time.perf_counter(), max_result_bytes=64 * 1024 * 1024
    )
    assert outcome.kind == DEAD and outcome.error_type == "PermanentError"
    assert "a string of 268,435,456 characters, more than the 67,108,864 allowed" in outcome.message


def test_what_the_probe_does_not_see_is_measured_by_the_encoder():
    fits = {"rows": ["r" * 10] * 50}
    assert _completed(_job(), fits, time.perf_counter(), max_result_bytes=10_000).kind == COMPLETED
    for too_large in ({"deep": {"blob": "x" * 5000}}, ["abcdefghij"] * 500):
        outcome = _completed(_job(), too_large, time.perf_counter(), max_result_bytes=LIMIT)
        assert outcome.kind == DEAD and "more than the 1,000 allowed" in outcome.message
