"""The audit log's vocabulary: who acts (`Actor`), what was recorded (`AuditEntry`, `AuditPage`) and
what a verification of the chain found (`AuditVerdict`). The log itself is ``jobqueue.audit_log``
(migration 0032; docs/security.md "Audit log").

An entry is written by the action's own statement (``jobqueue.audit()``), so it names who the
database saw: the login role, or — when the REST API acts for an API key — the key, its producer
and the HTTP client, which the API passes along as an `Actor`.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobqueue.model.api_keys import ApiKey

#: Every action recorded, as ``<area>.<verb>``: a listing's ``action`` filter takes one, or an area
#: (``dlq``: every dead-letter action).
ACTIONS = (
    "job.cancel",
    "job.cancel_all",
    "job.delete",
    "dlq.retry",
    "dlq.retry_all",
    "dlq.purge",
    "queue.pause",
    "queue.resume",
    "queue.limits",
    "queue.defaults",
    "queue.shedding",
    "apikey.create",
    "apikey.revoke",
    "circuit.open",
    "circuit.close",
    "limit.set",
    "limit.clear",
    "schedule.add",
    "schedule.change",
    "schedule.pause",
    "schedule.resume",
    "schedule.remove",
    "schedule.run",
    "keys.rotate",
    "role.grant",
    "role.revoke",
    "role.login",
    "role.timeouts",
    "audit.prune",  # retention (the maintenance leader), not an operator's action
)
AREAS = tuple(dict.fromkeys(action.split(".")[0] for action in ACTIONS))


@dataclass(frozen=True, slots=True)
class Actor:
    """The API key an action is done for, and the HTTP client that sent it (its address, as the
    server saw it: behind a proxy, what uvicorn's trusted proxy headers made of it)."""

    key_id: uuid.UUID
    name: str  # the key's producer id: what keys are "mapped to"
    producer: str | None  # the same for a producer key (its own entries are these); None for an admin key
    client: str | None

    @classmethod
    def of_key(cls, key: ApiKey, client: str | None) -> "Actor":
        return cls(key.id, key.producer_id, None if key.is_admin else key.producer_id, client)

    def claim(self) -> str:
        """The ``jobqueue.actor`` setting ``jobqueue.audit()`` reads (believed from the API's login only)."""
        return json.dumps(
            {"actor": self.name, "key_id": str(self.key_id), "producer": self.producer, "client": self.client}
        )


@dataclass(frozen=True, slots=True)
class AuditEntry:
    seq: int  # its place in the chain (commit order)
    at: datetime
    actor: str  # the API key's producer id, or the login role
    action: str
    target: str | None
    details: dict[str, Any]
    api_key_id: uuid.UUID | None
    client_addr: str | None
    db_role: str  # the login the statement ran as (the API's own, for a key's action)
    application_name: str
    producer_id: str | None  # whose own entries this is one of (a producer key or login)
    hash: str  # hex


@dataclass(frozen=True, slots=True)
class AuditPage:
    entries: list[AuditEntry]
    next_cursor: str | None  # None: nothing older


@dataclass(frozen=True, slots=True)
class AuditVerdict:
    """What `jobqueue audit verify` found: ``broken_at`` is the first seq where the chain breaks
    (None: intact), ``problem`` says how."""

    checked: int  # entries whose hashes were recomputed
    first_seq: int  # the oldest entry kept (retention removed the ones before)
    last_seq: int  # the head: the newest entry committed when the verification began
    head_hash: str  # hex: keep it elsewhere to tell, later, that nothing before it was rewritten
    broken_at: int | None = None
    problem: str | None = None

    @property
    def intact(self) -> bool:
        return self.broken_at is None
