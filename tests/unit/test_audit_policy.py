"""The audit log's two rules that code review would miss (docs/security.md "Audit log"):

- a named query that records an action (``jobqueue.audit(`` in its SQL, or a call of a function
  that records itself) is built as an `ActionCall` in the store — else the REST API would run it
  without the key's identity and the entry would name the API's login — and an `ActionCall` is
  one that records (a new admin statement without the call fails here, not in production);
- the hot path records nothing: no query the worker's claim, ack or enqueue runs mentions it.
"""

from __future__ import annotations

import re
from pathlib import Path

from jobqueue.db.queries import queries

STORE = Path(__file__).resolve().parents[2] / "jobqueue" / "store"
#: The SQL functions that record what they do (migration 0032).
RECORDING_FUNCTIONS = (
    "jobqueue.cancel(",
    "jobqueue.grant_role(",
    "jobqueue.revoke_role(",
    "jobqueue.create_login(",
    "jobqueue.set_login_timeouts(",
    "jobqueue.prune_audit_log(",
)
RECORDS = re.compile(r"jobqueue\.audit\((?!\))")  # a call, not a mention of jobqueue.audit() in a comment
#: Named queries whose only entry is the prune's own (the maintenance leader, not a client's action).
MAINTENANCE = {"audit_prune"}
HOT = (
    "job_claim",
    "job_complete_many",
    "job_fail_many",
    "job_release_many",
    "job_extend_leases",
    "job_enqueue",
    "job_enqueue_many",
    "job_reclaim_expired",
)


def _built(kind: str) -> set[str]:
    pattern = re.compile(r"(?<![A-Za-z])" + kind + r"\(\s*\"(\w+)\"")
    return {name for path in STORE.glob("*.py") for name in pattern.findall(path.read_text())}


def test_the_queries_that_record_an_action_are_exactly_the_action_calls():
    recording = {
        name
        for name, sql in queries().items()
        if RECORDS.search(sql) or any(function in sql for function in RECORDING_FUNCTIONS)
    } - MAINTENANCE
    actions = _built("ActionCall")
    assert actions == recording, (
        f"records but is a plain Call: {sorted(recording - actions)}; "
        f"an ActionCall that records nothing: {sorted(actions - recording)}"
    )
    assert not actions & _built("Call"), "built both ways"


def test_the_hot_path_records_nothing():
    found = {name: sql for name, sql in queries().items() if name.startswith(HOT)}
    assert len(found) >= len(HOT)
    assert not [name for name, sql in found.items() if "audit" in sql]
