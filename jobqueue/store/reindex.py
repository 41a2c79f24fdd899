"""Calls of the reindexer (sql/queries/reindex.sql): which live-state indexes are bloated, and the
static statements that rebuild each (index names are never spliced into SQL)."""

from __future__ import annotations

from jobqueue.db import Call, column, no_result

LIVE_STATE_INDEXES = ("jobs_claim_idx", "jobs_lease_idx", "jobs_expiry_idx", "jobs_retry_wait_idx")


def bloated(*, factor: float, min_pages: int) -> Call[list[str]]:
    return Call("reindex_bloated", {"factor": factor, "min_pages": min_pages}, column)


def drop_leftovers(index: str) -> list[Call[None]]:
    """Drop what a failed rebuild of ``index`` left behind (``<index>_ccnew``, ``<index>_ccold``)."""
    return [Call(f"reindex_drop_{_known(index)}_{suffix}", {}, no_result) for suffix in ("ccnew", "ccold")]


def rebuild(index: str) -> Call[None]:
    return Call(f"reindex_{_known(index)}", {}, no_result)


def _known(index: str) -> str:
    if index not in LIVE_STATE_INDEXES:
        raise ValueError(f"the reindexer rebuilds only {', '.join(LIVE_STATE_INDEXES)}, not {index!r}")
    return index
