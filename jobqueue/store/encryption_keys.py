"""Calls of jobqueue.encryption_keys (sql/queries/encryption_keys.sql): the key ids rotations held."""

from __future__ import annotations

from typing import Iterable

from jobqueue.db.gateway import ActionCall, Call


def record(key_ids: Iterable[str]) -> Call[set[str]]:
    """Record ``key_ids`` (a ring's); every key id ever recorded, them included."""
    return ActionCall("encryption_key_record", {"key_ids": list(key_ids)}, lambda rows: {row[0] for row in rows})
