"""Calls on jobqueue.api_keys (sql/queries/api_keys.sql), and the key format itself.

A key is ``jq_`` + 43 URL-safe characters (256 random bits). Only its SHA-256 is stored: a slow
password hash protects guessable secrets, and these are not guessable, so the lookup can stay
one index probe per request.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from datetime import timedelta

from jobqueue.db.gateway import ActionCall, Call
from jobqueue.model.api_keys import ApiKey

KEY_PREFIX_LENGTH = 11  # "jq_" + 8 characters: shown in listings to recognise a key


def new_key() -> str:
    return "jq_" + secrets.token_urlsafe(32)


def key_hash(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def _keys(rows: list[tuple]) -> list[ApiKey]:
    return [ApiKey(*row) for row in rows]


def _first_key(rows: list[tuple]) -> ApiKey | None:
    return ApiKey(*rows[0]) if rows else None


def create(
    *,
    key: str,
    producer_id: str,
    role: str,
    queues: list[str] | None = None,
    job_types: list[str] | None = None,
    name: str | None = None,
    expires_in: timedelta | None = None,
) -> Call[ApiKey | None]:
    return ActionCall(
        "api_key_create",
        {
            "key_hash": key_hash(key),
            "key_prefix": key[:KEY_PREFIX_LENGTH],
            "producer_id": producer_id,
            "role": role,
            "queues": queues,
            "job_types": job_types,
            "name": name,
            "expires_in": expires_in,
        },
        _first_key,
    )


def lookup(key: str) -> Call[ApiKey | None]:
    return Call("api_key_lookup", {"key_hash": key_hash(key)}, _first_key)


def list_all() -> Call[list[ApiKey]]:
    return Call("api_key_list", {}, _keys)


def revoke(key_id: uuid.UUID) -> Call[ApiKey | None]:
    return ActionCall("api_key_revoke", {"id": key_id}, _first_key)


def secret(name: str) -> Call[bytes | None]:
    """The API's shared secret ``name`` (jobqueue.api_secrets), or None when there is none."""
    return Call("api_secret", {"name": name}, lambda rows: bytes(rows[0][0]) if rows else None)
