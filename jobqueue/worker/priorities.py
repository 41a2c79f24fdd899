"""Weighted priority mode: split the free slots of one claim across the four levels by weight.

Strict mode always takes the most urgent level first, so a flood of critical jobs starves `low`.
In weighted mode every claim draws its slots at random in proportion to the weights (default
8:4:2:1), so each level with work keeps its share over time; slots a level cannot fill (no work
there) are filled in strict order by a second claim, so no capacity is wasted.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Sequence

_RNG = random.Random()


def draw_slots(
    free: int, weights: Sequence[int], queues: Sequence[str], rng: random.Random | None = None
) -> list[tuple[str, int, int]]:
    """(queue, priority level, slots) triples whose slots add up to ``free``."""
    draw = rng or _RNG
    levels = draw.choices(range(len(weights)), weights=weights, k=free)
    picks = Counter((draw.choice(queues), level) for level in levels)
    return [(queue, level, count) for (queue, level), count in sorted(picks.items())]
