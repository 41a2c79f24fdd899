"""Calls of the reindexer (sql/queries/reindex.sql): leftovers of failed rebuilds, which indexes
are bloated (exactly, with pgstattuple, or estimated), and the static statements that drop and
rebuild each (index names are never spliced into SQL)."""

from __future__ import annotations

from typing import NamedTuple

from jobqueue.db.gateway import Call, any_row, column, no_result

#: Every index of ``jobqueue.jobs``: the live-state ones (claim, lease, expiry, retry) empty out
#: as jobs move on, the ones that grow with history (primary key, finished, dead letters) as the
#: pruner deletes; after a backlog is drained and pruned, each keeps its peak size until rebuilt.
COVERED_INDEXES = (
    "jobs_pkey",
    "jobs_claim_idx",
    "jobs_lease_idx",
    "jobs_finished_idx",
    "jobs_expiry_idx",
    "jobs_retry_wait_idx",
    "jobs_dead_letter_idx",
)
LEFTOVER_SUFFIXES = ("_ccnew", "_ccold")


class Bloated(NamedTuple):
    name: str  # the index
    file_pages: int
    needed_pages: int


def leftovers() -> Call[list[str]]:
    return Call("reindex_leftovers", {"indexes": list(COVERED_INDEXES)}, column)


def use_pgstattuple() -> Call[bool]:
    """Inside a transaction: whether pgstatindex() can be used, and if so on this transaction's
    search_path for `bloated`."""
    return Call("reindex_use_pgstattuple", {}, any_row)


def bloated(*, exact: bool, factor: float, min_waste_mb: float) -> Call[list[Bloated]]:
    return Call(
        "reindex_bloated_exact" if exact else "reindex_bloated_estimate",
        {"indexes": list(COVERED_INDEXES), "factor": factor, "min_waste_mb": min_waste_mb},
        lambda rows: [Bloated(*row) for row in rows],
    )


def drop_leftover(name: str) -> Call[None]:
    """Drop ``<index>_ccnew`` or ``<index>_ccold``, what a failed rebuild of a covered index left."""
    for suffix in LEFTOVER_SUFFIXES:
        if name.endswith(suffix) and name.removesuffix(suffix) in COVERED_INDEXES:
            return Call(f"reindex_drop_{name.removesuffix(suffix)}_{suffix[1:]}", {}, no_result)
    raise ValueError(
        f"the reindexer drops only what its rebuilds left ({', '.join(LEFTOVER_SUFFIXES)} "
        f"of {', '.join(COVERED_INDEXES)}), not {name!r}"
    )


def rebuild(index: str) -> Call[None]:
    if index not in COVERED_INDEXES:
        raise ValueError(f"the reindexer rebuilds only {', '.join(COVERED_INDEXES)}, not {index!r}")
    return Call(f"reindex_{index}", {}, no_result)
