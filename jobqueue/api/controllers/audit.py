"""``GET /admin/audit``: the audit log, newest first — who cancelled, retried, purged, paused,
changed a limit, a breaker, a schedule or a key, when, and from where (docs/security.md "Audit
log").

An admin key reads every entry; a producer key only its own (the entries of actions done with a
key of its producer, or by a database login held to it) — what it did is its business, what
operators did is not. Pages as ``GET /jobs`` does: at most ``limit`` entries, each page examining
a bounded stretch of the log, so a page may be short, even empty, and still have a
``next_cursor``; the cursor is sealed for the caller (`jobqueue.api.cursors`), since the position
a page stopped at is often another producer's entry.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

import msgspec
from litestar import Controller, get
from litestar.params import FromQuery, QueryParameter

from jobqueue.api.auth import AnyRequest
from jobqueue.api.errors import error_responses
from jobqueue.api.services import ServicesDep
from jobqueue.model.audit import AuditEntry


class AuditEntryOut(msgspec.Struct):
    seq: int
    at: datetime
    actor: str
    action: str
    target: str | None
    details: dict[str, Any]
    api_key_id: uuid.UUID | None
    client_addr: str | None
    db_role: str
    application_name: str
    producer_id: str | None
    hash: str

    @classmethod
    def of(cls, entry: AuditEntry) -> "AuditEntryOut":
        return cls(**{field: getattr(entry, field) for field in cls.__struct_fields__})


class AuditList(msgspec.Struct):
    entries: list[AuditEntryOut]
    next_cursor: str | None


class AuditController(Controller):
    path = "/admin/audit"
    tags = ["admin"]

    @get(
        "/",
        summary="The audit log, newest first: every operator's and producer's action, who did it and from "
        "where (an admin key: every entry; a producer key: its own)",
        responses=error_responses(422, 503),
    )
    async def entries(
        self,
        request: AnyRequest,
        services: ServicesDep,
        actor: Annotated[str | None, QueryParameter(description="the API key's producer id, or the login")] = None,
        action: Annotated[str | None, QueryParameter(description="an action (dlq.purge) or its area (dlq)")] = None,
        target: FromQuery[str | None] = None,
        since: Annotated[
            datetime | None, QueryParameter(description="written at or after (ISO 8601, with offset)")
        ] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=500)] = 50,
        cursor: Annotated[str | None, QueryParameter(description="next_cursor of the previous page")] = None,
    ) -> AuditList:
        user = request.user
        opened = await services.cursors.open(cursor, user)
        before = None if opened is None else str(uuid.UUID(opened).int)
        own = None if user.is_admin else user.producer_id
        page = await services.reads.read(
            user.id,
            lambda client: client.audit_log(
                limit=limit, cursor=before, actor=actor, action=action, target=target, since=since, producer_id=own
            ),
        )
        after = None if page.next_cursor is None else str(uuid.UUID(int=int(page.next_cursor)))
        return AuditList([AuditEntryOut.of(e) for e in page.entries], await services.cursors.seal(after, user))
