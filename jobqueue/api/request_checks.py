"""Checks every request passes before its handler runs, so that no endpoint answers a malformed
request by guessing, and no producer key reads what only operators should.

- A query parameter given twice (``?queue=a&queue=b``) is refused (422 naming it): Litestar would
  silently keep the last one, and a filter the caller did not mean is worse than an error.
- A query parameter given empty (``?queue=``) is refused the same way on every endpoint.
- Request bodies nested deeper than `MAX_JSON_DEPTH` are refused (422): the decoder recurses,
  and a body 1,000 levels deep used to end as a 500. Payloads are checked by `json_depth_exceeds`.
- `/metrics` and `/dashboard/overview` show hosts, process ids, queues and job types: they need an
  admin API key or the metrics token (``JOBQUEUE_METRICS_TOKEN``, for Prometheus), unless
  ``JOBQUEUE_METRICS_PUBLIC=1`` says they may be public (a private network). `/healthz` and
  `/readyz` stay public for probes.
"""

from __future__ import annotations

import hmac
from typing import Any

from litestar import Request
from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException
from litestar.handlers import BaseRouteHandler

from jobqueue.model.errors import ValidationError

#: Nesting a request body or a payload may have; deeper is refused. JSON documents people send to a
#: job queue are a few levels deep; this only stops bodies built to exhaust the decoder's stack.
MAX_JSON_DEPTH = 100


async def refuse_ambiguous_query(request: Request[Any, Any, Any]) -> None:
    """``before_request`` hook: each query parameter at most once, and never empty."""
    if not request.scope.get("query_string"):  # most requests (every submission) have none
        return
    seen: set[str] = set()
    for name, value in request.query_params.multi_items():
        if name in seen:
            raise ValidationError(name, "is given more than once; give it once")
        seen.add(name)
        if value == "":
            raise ValidationError(name, "must be a non-empty string when given")


def json_depth_exceeds(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a decoded JSON value nests deeper than ``limit`` (iterative: deep values must not
    recurse here either)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


async def metrics_reader(connection: ASGIConnection[Any, Any, Any, Any], _handler: BaseRouteHandler) -> None:
    """Guard for the figures that describe the whole system (see the module docstring)."""
    services = connection.app.state["services"]
    settings = services.settings.metrics
    if settings.public:
        return
    scheme, _, token = connection.headers.get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise NotAuthorizedException(
            "send an admin API key or the metrics token as 'Authorization: Bearer <token>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if settings.token and hmac.compare_digest(token.encode(), settings.token.encode()):
        return
    principal = await services.keys.principal(token)
    if principal is None:
        raise NotAuthorizedException("unknown or revoked API key", headers={"WWW-Authenticate": "Bearer"})
    if not principal.is_admin:
        raise PermissionDeniedException("the system's figures need an admin API key or the metrics token")
