"""Time values that can never be stored are refused where they are written (issue 17, §3): a task's
timeout, a backoff, Retry(after=), a circuit's window and every seconds setting follow the one rule
of jobqueue.model.durations — finite, not negative (above 0 where 0 means nothing), at most 3650 days,
the enqueue's bound. inf and nan are not JSON (a task timeout of inf made every claim fail), and a
huge finite span is a time after year 9999 that no later read of the row survives."""

from __future__ import annotations

import math
from dataclasses import fields
from datetime import timedelta

import pytest

from jobqueue import Backoff, JobQueue, Retry
from jobqueue.config import DURATIONS, OTHER_FLOATS, RETENTION_DAYS, Settings
from jobqueue.model.durations import LONGEST_SECONDS, duration_problem
from jobqueue.model.errors import ValidationError

NEVER = (math.inf, -math.inf, math.nan, 3e11, LONGEST_SECONDS + 1, 10**400)


def test_the_rule():
    assert duration_problem(1) is None and duration_problem(LONGEST_SECONDS) is None
    assert duration_problem(timedelta(days=3650)) is None and duration_problem(0, zero=True) is None
    assert duration_problem(math.inf) == "must be a finite number of seconds (got inf)"
    assert duration_problem(math.nan) == "must be a finite number of seconds (got nan)"
    assert duration_problem(3e11) == "must be more than 0 and at most 3650 days (got 3e+11 s)"
    assert duration_problem(-1, zero=True) == "must be 0 to 3650 days (got -1 s)"
    assert duration_problem(0) is not None and duration_problem(True) is not None
    assert duration_problem("5") == "must be a number of seconds (got '5')"
    assert duration_problem(timedelta(days=3651)) is not None


@pytest.mark.parametrize("timeout", [*NEVER, 0, -1, True, "30"])
def test_a_task_timeout_that_cannot_be_stored_is_refused_at_import(timeout):
    """It became every claim's JSON (Infinity is not JSON: every claim of every type failed) and
    each attempt's deadline (a huge one: a deadline after year 9999)."""
    app = JobQueue()
    with pytest.raises(ValidationError) as refused:

        @app.task("t", timeout=timeout)
        def t(job): ...

    assert refused.value.field == "timeout" and not app.tasks


def test_the_longest_task_timeout_is_accepted():
    app = JobQueue()
    app.task("t", timeout=LONGEST_SECONDS)(lambda job: None)
    assert app.tasks["t"].timeout == LONGEST_SECONDS


@pytest.mark.parametrize("field", ["base", "max"])
@pytest.mark.parametrize("value", [*NEVER, -1])
def test_a_backoff_span_that_cannot_be_stored_is_refused(field, value):
    with pytest.raises(ValidationError) as refused:
        Backoff(**{field: value})
    assert refused.value.field == f"backoff.{field}"


@pytest.mark.parametrize(
    "field, value",
    [
        ("multiplier", math.nan),
        ("multiplier", math.inf),
        ("multiplier", 0.5),
        ("jitter", math.nan),
        ("jitter", math.inf),
        ("jitter", 1.5),
    ],
)
def test_a_backoff_factor_must_be_finite_and_in_range(field, value):
    with pytest.raises(ValidationError) as refused:
        Backoff(**{field: value})
    assert refused.value.field == f"backoff.{field}"


def test_the_jittered_delay_stays_within_the_bound():
    """max at the bound plus 100 % jitter would be twice the longest span."""
    longest = Backoff(base=LONGEST_SECONDS, max=LONGEST_SECONDS, jitter=1.0)

    class Top:
        @staticmethod
        def random() -> float:
            return 0.999999

    assert longest.delay(5, rng=Top()) == LONGEST_SECONDS  # type: ignore[arg-type]


@pytest.mark.parametrize("after", [*NEVER, -1])
def test_retry_after_that_cannot_be_stored_is_refused_in_the_handler(after):
    with pytest.raises(ValueError, match=r"Retry\(after=\.\.\.\) must be"):
        Retry(after=after)
    assert Retry(after=0).after == 0 and Retry(after=LONGEST_SECONDS).after == LONGEST_SECONDS


def _listed(table: dict[str, dict]) -> set[tuple[str, str]]:
    return {(section, name) for section, names in table.items() for name in names}


def test_every_seconds_setting_is_under_the_rule():
    """A float setting added later, in any section, must be listed (as a duration, in days, or as another number)."""
    listed = _listed(DURATIONS) | _listed(RETENTION_DAYS) | _listed(OTHER_FLOATS)
    defaults = Settings()
    floats = {
        (section.name, f.name)
        for section in fields(Settings)
        for f in fields(getattr(defaults, section.name))
        if f.type in ("float", float)
    }
    assert floats == listed


@pytest.mark.parametrize("section, name", sorted(_listed(DURATIONS)))
@pytest.mark.parametrize("value", [math.inf, math.nan, 3e11])
def test_a_seconds_setting_that_cannot_be_stored_is_refused_naming_its_variable(section, name, value):
    variable = DURATIONS[section][name][0].split()[0]
    with pytest.raises(ValueError, match=f"^{variable}"):
        getattr(Settings(), section).with_(**{name: value})


@pytest.mark.parametrize(
    "env, value",
    [
        ("JOBQUEUE_LEASE_SECONDS", "inf"),
        ("JOBQUEUE_PROCESSING_TTL", "nan"),
        ("JOBQUEUE_POLL_INTERVAL", "1e300"),
        ("JOBQUEUE_SHUTDOWN_GRACE", "-1"),
        ("JOBQUEUE_RETENTION_COMPLETED_DAYS", "1e9"),
        ("JOBQUEUE_API_RATE_LIMIT", "nan"),
        ("JOBQUEUE_REINDEX_FACTOR", "inf"),
    ],
)
def test_from_the_environment_too(env, value):
    with pytest.raises(ValueError, match=f"^{env}"):
        Settings.from_env({env: value})
