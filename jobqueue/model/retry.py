"""Backoff policy: how long a failed attempt waits before it runs again."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from jobqueue.model.durations import LONGEST_SECONDS, duration_problem
from jobqueue.model.errors import ValidationError


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with jitter: the n-th retry waits ``min(base * multiplier**(n-1), max)``
    seconds plus up to ``jitter`` of that again, drawn at random so that a burst of failures does
    not come back as a burst (SPEC defaults: 1 s, x2, capped at 30 s, 10 % jitter). ``base`` and
    ``max`` are durations (`jobqueue.model.durations`: finite, at most 3650 days); a bad setting is a
    `ValidationError` naming it, at import."""

    base: float = 1.0
    multiplier: float = 2.0
    max: float = 30.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        for name in ("base", "max"):  # NaN passed every comparison; inf and huge ones wedged the job's row
            if problem := duration_problem(getattr(self, name), zero=True):
                raise ValidationError(f"backoff.{name}", problem)
        for name, low, high in (("multiplier", 1.0, math.inf), ("jitter", 0.0, 1.0)):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not low <= value <= high
                or not math.isfinite(value)
            ):
                raise ValidationError(
                    f"backoff.{name}",
                    f"must be a finite number from {low:g}"
                    f"{'' if high == math.inf else f' to {high:g}'} (got {value!r})",
                )

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        exponent = max(attempt - 1, 0)
        try:
            raw = self.base * self.multiplier**exponent
        except OverflowError:
            raw = self.max
        capped = min(raw, self.max)
        draw = (rng or random).random()
        return min(capped + capped * self.jitter * draw, LONGEST_SECONDS)  # the jitter never passes the bound
