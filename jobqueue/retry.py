"""Backoff policy: how long a failed attempt waits before it runs again."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with jitter: the n-th retry waits ``min(base * multiplier**(n-1), max)``
    seconds plus up to ``jitter`` of that again, drawn at random so that a burst of failures does
    not come back as a burst (SPEC defaults: 1 s, x2, capped at 30 s, 10 % jitter)."""

    base: float = 1.0
    multiplier: float = 2.0
    max: float = 30.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if self.base < 0 or self.max < 0 or self.multiplier < 1 or not 0 <= self.jitter <= 1:
            raise ValueError("backoff needs base >= 0, max >= 0, multiplier >= 1 and 0 <= jitter <= 1")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        exponent = max(attempt - 1, 0)
        try:
            raw = self.base * self.multiplier**exponent
        except OverflowError:
            raw = self.max
        capped = min(raw, self.max)
        draw = (rng or random).random()
        return capped + capped * self.jitter * draw
