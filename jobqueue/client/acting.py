"""Whose action a client call is, when it is done for an API key: the REST API says so once per
request (`act_for`, in its authentication middleware, undone when the request ends), and the
clients run each action Call (`jobqueue.db.gateway.ActionCall`) of that request in a transaction
that first sets ``jobqueue.actor`` to it, so the audit log names the key, its producer and the
HTTP client rather than the API's login. Outside of that (the CLI, scripts, workers) nothing is
set and an action is its own one statement, recorded as the login role that ran it.

A context variable, not a client setting: one API client serves every request at once, and each
request's task (or thread, for the sync client) sees only its own actor. The database believes
the setting only from a login holding ``jobqueue_api`` (or the owner): a producer's own session
that sets it is recorded as itself.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar, Token
from typing import Iterator

from jobqueue.db import gateway as db
from jobqueue.model.api_keys import ApiKey
from jobqueue.model.audit import Actor
from jobqueue.store import audit as audit_store

#: The API key and the HTTP client's address: the `Actor` is made only when an action needs it (a
#: request costs two context-variable sets, ~1 µs, where building it each time cost 3).
_ACTOR: ContextVar[tuple[ApiKey, str | None] | None] = ContextVar("jobqueue_actor", default=None)
_Token = Token[tuple[ApiKey, str | None] | None]


@contextlib.contextmanager
def acting(key: ApiKey | None, client: str | None = None) -> Iterator[None]:
    """Client calls in this block are done for API key ``key`` from address ``client`` (None: for
    nobody but the login)."""
    token = act_for(key, client)
    try:
        yield
    finally:
        stop_acting(token)


def act_for(key: ApiKey | None, client: str | None = None) -> _Token:
    """From now on in this task (or thread), client calls are done for ``key``; `stop_acting`
    with the token undoes this and every later `act_for` (how the REST API scopes it to a request:
    its authentication middleware, which learns the key midway, `jobqueue.api.auth`)."""
    return _ACTOR.set(None if key is None else (key, client))


def stop_acting(token: _Token) -> None:
    _ACTOR.reset(token)


def actor_calls(call: db.Call) -> list[db.Call] | None:
    """The statements to run for ``call`` in one transaction — the actor's setting, then the call —
    when it is an action done for an API key; None when it runs as it is."""
    acting_for = _ACTOR.get()
    if acting_for is None or not isinstance(call, db.ActionCall):
        return None
    return [audit_store.set_actor(Actor.of_key(*acting_for)), call]
