"""How long a span of time jobqueue accepts: finite, not negative (or above 0 where 0 means
nothing), and at most ten years — the rule `jobqueue.job_problem()` in SQL applies to an
enqueue's delay, timeout, expiry and idempotency window (migrations 0017, 0022), kept here so
that every other duration (a task's timeout, a backoff, ``Retry(after=)``, a circuit's window,
every ``JOBQUEUE_*`` seconds setting) is refused by the same rule, with the same words, where it
is written: at import, at start-up, or in the handler that raised it.

Why: a span becomes a timestamp (``now() + span``) or a JSON number sooner or later. ``inf`` and
``nan`` are not JSON (a task ``timeout=math.inf`` made every claim of every job type fail, as the
claim sends the timeouts as JSON), and a huge finite span is a time after year 9999, which
Python's datetime cannot hold: every later read of that row fails (the bug 0022 fixed for run_at).
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Any

#: The longest span: what an enqueue accepts for a delay, timeout, expiry or idempotency window.
LONGEST = timedelta(days=3650)
LONGEST_SECONDS = LONGEST.total_seconds()


def _describe(seconds: float) -> str:
    return f"{seconds / 86400:g} days" if seconds % 86400 == 0 else f"{seconds:g} seconds"


def duration_problem(value: Any, *, zero: bool = False, longest: float = LONGEST_SECONDS) -> str | None:
    """Why ``value`` (seconds, or a timedelta) is refused as a duration, or None when it is fine.
    ``zero``: 0 is allowed (a grace, a cooldown, "off"); otherwise it must be more than 0."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond any float
            seconds = math.inf
    else:
        return f"must be a number of seconds (got {value!r})"
    if not math.isfinite(seconds):
        return f"must be a finite number of seconds (got {value!r})"
    if seconds < 0 or seconds > longest or (seconds == 0 and not zero):
        low = "0 to" if zero else "more than 0 and at most"
        return f"must be {low} {_describe(longest)} (got {seconds:g} s)"
    return None


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_span(text: str, *, longest: float = LONGEST_SECONDS) -> float:
    """``"30d"``, ``"12h"``, ``"90m"``, ``"45s"``, ``"2w"`` or plain seconds → seconds, by the
    rule above: ``inf``, ``-1d`` and ``99999999d`` raise ValueError, one line saying what is wanted."""
    match = _SPAN.match(text) if isinstance(text, str) else None
    seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"] if match else None
    problem = "must be a duration" if seconds is None else duration_problem(seconds, longest=longest)
    if seconds is None or problem is not None:
        raise ValueError(
            f"must be a duration like 30d, 12h, 90m or 45s, more than 0 and at most {_describe(longest)} (got {text!r})"
        )
    return seconds
