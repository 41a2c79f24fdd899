"""Every failure becomes a JSON body ``{"error", "message", "field"?}`` with a fitting status.

- bad input (our `ValidationError` or a request Litestar could not parse) → 422 naming the field;
- an unknown job, one of another producer, an unknown schedule or circuit breaker → 404; a change the job's state
  forbids → 409; a repeated idempotency key whose job differs, with ``idempotency_mismatch:
  "reject"`` → 409 ``idempotency_mismatch`` naming the field;
- the database unreachable (or read-only: a standby during a failover), busy (a lock or
  statement timeout) or not migrated → 503 with ``Retry-After``: the request did nothing (a job is
  never reported created unless its statement committed); job events with no LISTEN connection
  (``JOBQUEUE_LISTEN=0``, PgBouncer) → 503 ``events_unavailable``;
- the database role lacking a privilege → 403 ``permission_denied`` (an operator must GRANT it);
- backpressure → 429 (rate limited above the soft limit) or 503 (hard limit, shedding, too many
  queues), with ``Retry-After`` — the API's own, or the database's gate (`QueueFull`); a body over
  ``JOBQUEUE_API_MAX_BODY_BYTES`` → 413 naming that setting and its value.
"""

from __future__ import annotations

import logging
import math
import re
import uuid
from typing import Any

from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException
from litestar.exceptions import ValidationException as RequestInvalid
from litestar.openapi import ResponseSpec

from jobqueue.api.backpressure import Overloaded
from jobqueue.api.schemas import ErrorBody
from jobqueue.events.hub import EventsUnavailable
from jobqueue.model.errors import (
    CircuitNotFound,
    Conflict,
    DatabaseUnavailable,
    EncryptionUnavailable,
    IdempotencyMismatch,
    JobNotFound,
    LimitNotFound,
    NotMigrated,
    PermissionDenied,
    QueueFull,
    QueueNotFound,
    ScheduleNotFound,
    ValidationError,
)

log = logging.getLogger("jobqueue.api")

_STATUS_NAMES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid",
    429: "rate_limited",
    500: "internal",
    503: "unavailable",
}


def error_response(
    status: int,
    message: str,
    *,
    error: str | None = None,
    field: str | None = None,
    retry_after: float | None = None,
    headers: dict[str, str] | None = None,
    state: str | None = None,
) -> Response[Any]:
    """An `ErrorBody` response; typed ``Any`` so a handler declaring its success body (which
    Litestar documents as the 200 schema) can return it too."""
    headers = dict(headers or {})
    if retry_after is not None:
        headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
    body = ErrorBody(error=error or _STATUS_NAMES.get(status, "error"), message=message, field=field, state=state)
    return Response(body, status_code=status, headers=headers, media_type=MediaType.JSON)


_DESCRIPTIONS = {
    401: "no, unknown or revoked API key",
    403: "needs an admin API key, or the database refused the API's role",
    404: "no such job (or not yours), schedule or circuit breaker",
    409: "the job's state does not allow it (submissions: idempotency_mismatch, the key's job differs)",
    413: "request body too large",
    422: "invalid input; `field` names it",
    429: "rate limited above the queue's soft limit; see Retry-After",
    503: "database unavailable, not migrated, or queue at its hard limit; see Retry-After",
}


def error_responses(*codes: int) -> dict[int, ResponseSpec]:
    """OpenAPI entries for the error statuses a handler may answer (401 is implied by auth; 403
    by the database: whatever may answer 503 reaches it, and its role may lack a privilege)."""
    if 503 in codes and 403 not in codes:
        codes = (403, *codes)
    return {
        code: ResponseSpec(data_container=ErrorBody, description=_DESCRIPTIONS[code], generate_examples=False)
        for code in sorted(codes)
    }


def _services_retry_after(request: Request) -> int:
    return request.app.state["services"].settings.api.retry_after


class NotAllowed(Exception):
    """The API key's allow-lists do not cover this submission (403 naming the field)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def _not_allowed(_request: Request, exc: NotAllowed) -> Response:
    return error_response(403, exc.message, error="not_allowed", field=exc.field)


def _invalid(_request: Request, exc: ValidationError) -> Response:
    return error_response(422, exc.message, field=exc.field)


_NAMED_FIELD = re.compile(r"(unknown|missing required) field `([^`]*)`(?: - at `\$\.?([^`]*)`)?")
_AT_PATH = re.compile(r" - at `\$\.?([^`]*)`$")


def _request_invalid(_request: Request, exc: RequestInvalid) -> Response:
    """Litestar could not parse the request: name the field (``jobs[2].priority``, ``limit``…)."""
    problems: Any = exc.extra or []
    first = problems[0] if isinstance(problems, list) and problems and isinstance(problems[0], dict) else {}
    message = str(first.get("message") or exc.detail)
    field = first.get("key") or None
    named = _NAMED_FIELD.search(message)
    at = _AT_PATH.search(message)
    if named:
        field = ".".join(part for part in (named.group(3), named.group(2)) if part)
        message = "is not a field of this request" if named.group(1) == "unknown" else "is required"
    elif at and at.group(1):
        field = at.group(1)
        message = message[: at.start()]
    return error_response(422, message, field=field)


def _not_found(_request: Request, exc: LookupError) -> Response:
    return error_response(404, str(exc))


def _conflict(_request: Request, exc: Conflict) -> Response:
    return error_response(409, str(exc))


def _mismatch(_request: Request, exc: IdempotencyMismatch) -> Response:
    return error_response(409, str(exc), error="idempotency_mismatch", field=exc.field)


def _unavailable(request: Request, exc: DatabaseUnavailable) -> Response:
    log.warning("503: %s", exc)
    return error_response(
        503,
        "the database is unavailable; retry later (with the same idempotency key: the connection may have dropped"
        " after a commit, and the repeat returns that job)",
        error="database_unavailable",
        retry_after=_services_retry_after(request),
    )


def _queue_full(request: Request, exc: QueueFull) -> Response:
    """The database's gate (the maintenance leader found the queue full; `jobqueue.model.quotas`): as the
    API's own refusal would be, 503 with the reason."""
    return error_response(503, str(exc), error=exc.reason, retry_after=_services_retry_after(request))


def _permission_denied(_request: Request, exc: PermissionDenied) -> Response:
    log.error("403: %s", exc)  # a missing GRANT: an operator has to act
    return error_response(
        403, f"{exc}; nothing was done (the API's database role needs a GRANT)", error="permission_denied"
    )


def _events_unavailable(request: Request, exc: EventsUnavailable) -> Response:
    return error_response(503, str(exc), error="events_unavailable", retry_after=_services_retry_after(request))


def _not_migrated(request: Request, exc: NotMigrated) -> Response:
    return error_response(503, str(exc), error="not_migrated", retry_after=_services_retry_after(request))


def _overloaded(_request: Request, exc: Overloaded) -> Response:
    return error_response(exc.status, exc.message, error=exc.reason, retry_after=exc.retry_after)


def _http(request: Request, exc: HTTPException) -> Response:
    if exc.status_code == 404 and exc.detail == "Not Found":  # no route matched: say what was wrong
        return error_response(404, _no_route(request.url.path), error="not_found")
    if exc.status_code == 413:  # Litestar's own words name no limit: say which, and what to do
        limit = request.app.state["services"].settings.api.max_body_bytes
        return error_response(
            413,
            f"the request body is over the limit of {limit} bytes (JOBQUEUE_API_MAX_BODY_BYTES); nothing was "
            "written: send a smaller payload, or split a batch",
            headers=exc.headers,
        )
    return error_response(exc.status_code, str(exc.detail), headers=exc.headers)


_ID_PATH = re.compile(r"^/(?:admin/)?jobs/([^/]+)")


def _no_route(path: str) -> str:
    matched = _ID_PATH.match(path)
    if matched and matched.group(1) != "batch":
        try:
            uuid.UUID(matched.group(1))
        except ValueError:
            return f"{matched.group(1)[:100]!r} is not a job id: job ids are UUIDs"
    return f"no endpoint at {path[:200]} (see /schema)"


def _too_deep(request: Request, _exc: RecursionError) -> Response:
    log.warning("422: a body too deeply nested to decode on %s %s", request.method, request.url.path)
    return error_response(422, "the JSON body nests too deeply", error="invalid")


def _no_keys(_request: Request, exc: EncryptionUnavailable) -> Response:
    """The job has fields to encrypt and this API process has no key ring (its operator sets
    JOBQUEUE_ENCRYPTION_KEYS): 422 naming ``encrypt``, nothing written. Not a 5xx: the server is
    working as configured and refuses, rather than fails, to store those fields in plaintext."""
    log.warning("422: %s", exc)
    return error_response(422, str(exc), error="encryption_unavailable", field="encrypt")


def _internal(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal error")


EXCEPTION_HANDLERS: dict = {
    ValidationError: _invalid,
    NotAllowed: _not_allowed,
    RequestInvalid: _request_invalid,
    JobNotFound: _not_found,
    ScheduleNotFound: _not_found,
    CircuitNotFound: _not_found,
    LimitNotFound: _not_found,
    QueueNotFound: _not_found,
    Conflict: _conflict,
    IdempotencyMismatch: _mismatch,
    DatabaseUnavailable: _unavailable,
    QueueFull: _queue_full,
    PermissionDenied: _permission_denied,
    EventsUnavailable: _events_unavailable,
    NotMigrated: _not_migrated,
    Overloaded: _overloaded,
    HTTPException: _http,
    EncryptionUnavailable: _no_keys,
    RecursionError: _too_deep,  # the body decoder recursing into a body built to be deep
    Exception: _internal,
}
