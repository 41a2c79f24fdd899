"""A handler's result far over JOBQUEUE_MAX_RESULT_BYTES is refused before it is encoded: encoding a
256 MB string held the event loop for seconds, and under load every job of that worker lost its
lease (the fault campaign's poison scenario). The probe's answer is a lower bound, so it never
refuses a result that fits."""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime, timezone

import pytest

from jobqueue.models import Job
from jobqueue.worker import executor
from jobqueue.worker.executor import COMPLETED, DEAD, SIZE_PROBE_BUDGET, _completed, _json_length_at_least


def _job() -> Job:
    return Job(id=uuid.uuid4(), queue="q", job_type="t", payload={}, priority=2, attempt=1, max_attempts=3,
               traceparent=None, cancel_requested=False, created_at=datetime.now(timezone.utc))


@pytest.mark.parametrize("value", [
    "abc", {"a": "bc", "d": ["e", "fg"]}, [1, 2.5, None, True, {"k": ["v" * 50]}], {"x" * 30: 1}, [], {}, 7,
    {"nested": [[["deep" * 10]]]}, ["é" * 20, "\n" * 20],
])
def test_the_probe_never_exceeds_the_encoded_length(value):
    assert _json_length_at_least(value, 10**9) <= len(json.dumps(value))


def test_a_result_far_over_the_limit_is_refused_without_being_encoded(monkeypatch):
    def never(_value):
        raise AssertionError("the huge result was encoded")

    monkeypatch.setattr(executor, "dumps", never)
    started = time.perf_counter()
    outcome = _completed(_job(), {"attempt": 1, "blob": "x" * (2**28)}, started, max_result_bytes=64 * 1024 * 1024)
    assert outcome.kind == DEAD and outcome.error_type == "PermanentError"
    assert "more than 268,435,456 characters of JSON, more than the 67,108,864 allowed" in outcome.message


def test_results_within_the_limit_or_past_the_probes_budget_are_left_to_the_encoder():
    fits = {"rows": ["r" * 10] * 50}
    assert _completed(_job(), fits, time.perf_counter(), max_result_bytes=10_000).kind == COMPLETED
    # many small strings past the budget: the probe stops early, the encoder's exact length decides
    many = ["abcdefghij"] * (SIZE_PROBE_BUDGET * 3)
    assert _json_length_at_least(many, 10**9) < 10 * SIZE_PROBE_BUDGET
    outcome = _completed(_job(), many, time.perf_counter(), max_result_bytes=200_000)
    assert outcome.kind == DEAD and "more than the 200,000 allowed" in outcome.message
