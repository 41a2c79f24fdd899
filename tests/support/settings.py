"""Settings from one-level names, as tests write them: ``settings_of(dsn=dsn, poll_interval=1.0,
api_soft_limit=5)`` puts each value in its section (`jobqueue.config`).

A name is a field's own (``poll_interval``, ``dsn``), or its section's prefix and the field — the
names `Settings` had before it was split into sections, close to their ``JOBQUEUE_*`` variables:
``api_port`` is ``api.port``, ``api_soft_limit`` ``backpressure.soft_limit``, ``metrics_token``
``metrics.token``, ``encryption_keys`` ``encryption.keys``. A name two sections could claim
(``max_queues``) is refused: say which, with its prefix.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import fields
from functools import cache
from typing import Any

from jobqueue.config import Settings

#: The prefix each section's fields had when they were all in one Settings.
PREFIXES = {
    "worker": "worker_",
    "autoscale": "autoscale_",
    "backpressure": "api_",
    "api": "api_",
    "metrics": "metrics_",
    "encryption": "encryption_",
}
#: The one name that follows neither rule.
RENAMED = {"maintenance_xact_age": ("maintenance", "max_xact_age")}


@cache
def flat_names() -> dict[str, tuple[str, str]]:
    """Every accepted one-level name → (section, field)."""
    claims: dict[str, set[tuple[str, str]]] = defaultdict(set)
    defaults = Settings()
    for section in fields(Settings):
        for item in fields(getattr(defaults, section.name)):
            for name in (item.name, PREFIXES.get(section.name, "") + item.name):
                claims[name].add((section.name, item.name))
    names = {name: next(iter(owners)) for name, owners in claims.items() if len(owners) == 1}
    return names | RENAMED


def with_flat(settings: Settings, **changes: Any) -> Settings:
    """``settings`` with ``changes`` (one-level names) made in their sections."""
    names = flat_names()
    by_section: dict[str, dict[str, Any]] = defaultdict(dict)
    for name, value in changes.items():
        if name not in names:
            raise TypeError(f"no setting {name!r} (or one that two sections have: give its prefix)")
        section, item = names[name]
        by_section[section][item] = value
    return settings.with_(
        **{section: getattr(settings, section).with_(**values) for section, values in by_section.items()}
    )


def settings_of(**changes: Any) -> Settings:
    """The defaults with ``changes`` (one-level names)."""
    return with_flat(Settings(), **changes)
