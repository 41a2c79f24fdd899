"""Calls on the audit log (sql/queries/audit.sql): the actor setting the clients make before an
action for an API key, the listings, the chain's verification and retention.

Entries are written by the actions themselves — the store's `ActionCall`s (``jobqueue.audit()`` in
their statement) and the SQL functions ``jobqueue.cancel()`` and the role functions — never here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from jobqueue.db.gateway import Call, no_result, scalar
from jobqueue.db.transactions import Steps
from jobqueue.model.audit import Actor, AuditEntry, AuditPage, AuditVerdict

#: Entries one statement of the verification recomputes (about 10 ms per 10,000).
VERIFY_STRETCH = 10_000

_PROBLEMS = {
    "missing": "entry {seq} is missing: removed from the middle of the chain",
    "edited": "entry {seq} was edited: its hash is not that of its fields",
    "rewritten": "entry {seq} was rewritten, its hash too: the entry after it chained to another hash",
}


def set_actor(actor: Actor) -> Call[None]:
    """For the transaction: the API key ``jobqueue.audit()`` names (see `jobqueue.client.acting`)."""
    return Call("audit_set_actor", {"claim": actor.claim()}, no_result)


def list_entries(
    *,
    limit: int,
    scan: int,
    before: int | None = None,
    actor: str | None = None,
    action: str | None = None,
    target: str | None = None,
    since: datetime | None = None,
    producer_id: str | None = None,
) -> Call[AuditPage]:
    """One page newest first, examining at most ``scan`` entries (a page may hold fewer than
    ``limit``, even none, and still have a cursor, as the job listings); ``producer_id``: only
    that producer's own entries."""

    def decode(rows: list[tuple]) -> AuditPage:
        more = bool(rows) and (len(rows) == limit or rows[-1][-1] == scan)
        entries = [AuditEntry(*row[:12]) for row in rows if row[12]]
        return AuditPage(entries, str(rows[-1][0]) if more else None)

    params = {
        "limit": limit,
        "scan": scan,
        "before": before,
        "actor": actor,
        "action": action,
        "target": target,
        "since": since,
    }
    if producer_id is None:
        return Call("audit_list", params, decode)
    return Call("audit_list_of_producer", {**params, "producer_id": producer_id}, decode)


@dataclass(frozen=True, slots=True)
class _Head:
    last_seq: int
    last_hash: bytes
    pruned_seq: int
    pruned_hash: bytes
    outside: int  # entries outside the chain
    first_outside: int | None  # the first one's id


def _head(rows: list[tuple]) -> _Head | None:
    return _Head(rows[0][0], bytes(rows[0][1]), rows[0][2], bytes(rows[0][3]), *rows[0][4:6]) if rows else None


def _stretch(after_seq: int, after_hash: bytes, upto: int, limit: int) -> Call[tuple]:
    return Call(
        "audit_verify_stretch",
        {"after_seq": after_seq, "after_hash": after_hash, "upto": upto, "limit": limit},
        lambda rows: rows[0],
    )


def verification(stretch: int = VERIFY_STRETCH) -> Steps[AuditVerdict]:
    """Recompute the chain from its anchor (the last entry retention removed) to its head, a
    stretch at a time, in one snapshot; the verdict names the first entry where it breaks. Run
    with `jobqueue.db.transactions.run_steps`."""
    yield Call("audit_snapshot", {}, no_result)
    found: _Head | None = yield Call("audit_head", {}, _head)
    if found is None:
        return AuditVerdict(0, 0, 0, "", 0, "the chain's head (jobqueue.audit_chain) is missing")
    head = found
    after_seq, after_hash, checked = head.pruned_seq, head.pruned_hash, 0

    def verdict(broken_at: int | None = None, problem: str | None = None) -> AuditVerdict:
        return AuditVerdict(checked, head.pruned_seq + 1, head.last_seq, head.last_hash.hex(), broken_at, problem)

    while after_seq < head.last_seq:
        count, last_seq, last_hash, broken_at, problem = yield _stretch(after_seq, after_hash, head.last_seq, stretch)
        checked += count
        if broken_at is not None:
            return verdict(broken_at, _PROBLEMS[problem].format(seq=broken_at))
        if count == 0:
            return verdict(
                after_seq + 1, f"entries {after_seq + 1} to {head.last_seq} are missing: the newest were removed"
            )
        after_seq, after_hash = last_seq, bytes(last_hash)
    if after_hash != head.last_hash:
        return verdict(
            head.last_seq, f"entry {head.last_seq} was rewritten, its hash too: the chain's head recorded another"
        )
    if head.outside:
        return verdict(
            head.last_seq + 1,
            f"{head.outside} entries are outside the chain (the first: id {head.first_outside}), "
            "written with its trigger off",
        )
    return verdict()


def prune(*, keep: timedelta, limit: int) -> Call[int]:
    """Remove up to ``limit`` of the oldest entries written more than ``keep`` ago (at least a day),
    as the owner; the database's clock decides, so no caller can prune today's entries."""
    return Call("audit_prune", {"keep": keep, "limit": limit}, scalar)
