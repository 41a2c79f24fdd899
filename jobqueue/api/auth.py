"""API-key authentication: ``Authorization: Bearer <key>`` → a `Principal` on ``request.user``.

Keys are long random tokens stored only as their SHA-256 (a slow password hash buys nothing for
256-bit secrets, and the lookup stays one primary-key probe). Each maps to a producer id and a role,
``producer`` or ``admin``. Valid keys are cached per process for ``JOBQUEUE_API_KEY_CACHE_SECONDS``
(default 2 s), so a revoked key stops working within that time and a busy producer costs no extra
query per request — nor a wait: a key in use is reloaded in the background before it expires, and
concurrent requests share one lookup; unknown keys are never cached (a flood of bad tokens cannot
grow memory). A key past its ``expires_at`` is refused (401 naming the expiry) on every request,
cached or not: the expiry is checked against this host's clock each time, so a key cached a second
before it expired does not live on for the cache's lifetime.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from litestar import Request
from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException
from litestar.handlers import BaseRouteHandler
from litestar.middleware import AbstractAuthenticationMiddleware, AuthenticationResult, DefineMiddleware
from litestar.types import Receive, Scope, Send

from jobqueue.client.acting import act_for, stop_acting
from jobqueue.model.api_keys import ApiKey
from jobqueue.runtime.refresh_ahead import RefreshAheadCache

if TYPE_CHECKING:
    from jobqueue.api.services import Services

Principal = ApiKey
#: A request whose ``user`` is the authenticated key (how handlers that need the caller take it).
AnyRequest = Request[Principal, Any, Any]


class KeyCache:
    """Valid keys by token for ``ttl`` seconds, reloaded ahead of expiry while in use and looked up
    once for concurrent requests (`jobqueue.runtime.refresh_ahead`); bounded (least recently used keys
    leave first); unknown keys are never cached."""

    def __init__(
        self, lookup: Callable[[str], Awaitable[ApiKey | None]], ttl: float, max_entries: int = 10_000
    ) -> None:
        self._cache: RefreshAheadCache[str, ApiKey] = RefreshAheadCache(lookup, ttl, max_entries=max_entries)

    async def principal(self, token: str) -> ApiKey | None:
        return await self._cache.get(token)


class ApiKeyAuth(AbstractAuthenticationMiddleware):
    """Authenticates each request, and has the client act for its key while it is handled
    (`jobqueue.client.acting`): an action a handler takes is recorded in the audit log as the
    key's, from the request's client address, in the action's own transaction."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = act_for(None)  # whatever authentication sets ends with the request
        try:
            await super().__call__(scope, receive, send)
        finally:
            stop_acting(token)

    async def authenticate_request(self, connection: ASGIConnection) -> AuthenticationResult:
        scheme, _, token = connection.headers.get("authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise NotAuthorizedException(
                "send an API key as 'Authorization: Bearer <key>' (create one with `jobqueue apikey create`)",
                headers={"WWW-Authenticate": "Bearer"},
            )
        services: Services = connection.app.state["services"]
        principal = await services.keys.principal(token)
        if principal is None:
            raise NotAuthorizedException("unknown or revoked API key", headers={"WWW-Authenticate": "Bearer"})
        expires_at = principal.expires_at
        if expires_at is not None and expires_at <= datetime.now(timezone.utc):  # per request, cached or not
            named = f" ({principal.name})" if principal.name else ""
            raise NotAuthorizedException(
                f"API key {principal.key_prefix}…{named} expired at "
                f"{expires_at.isoformat(timespec='seconds')}: create a new one with `jobqueue apikey create`",
                headers={"WWW-Authenticate": 'Bearer error="invalid_token", error_description="expired"'},
            )
        client = connection.scope.get("client")
        act_for(principal, client[0] if client else None)
        return AuthenticationResult(user=principal, auth=principal.id)


def admin_only(connection: ASGIConnection[Any, Any, Any, Any], _handler: BaseRouteHandler) -> None:
    """Guard: the endpoint needs an admin key. (OPTIONS requests skip authentication, as CORS
    preflights must; they only list the allowed methods, so they pass here too.)"""
    user = connection.scope.get("user")
    if user is None:
        if connection.scope.get("method") == "OPTIONS":
            return
        raise NotAuthorizedException("send an admin API key as 'Authorization: Bearer <key>'")
    if not user.is_admin:
        raise PermissionDeniedException("this endpoint needs an admin API key")


def auth_middleware() -> DefineMiddleware:
    # The schema and its UIs are public: they describe the API, they do not expose data.
    return DefineMiddleware(ApiKeyAuth, exclude=["^/schema"])
