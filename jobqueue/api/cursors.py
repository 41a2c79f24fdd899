"""Listing cursors that tell their holder nothing: ``next_cursor`` of ``GET /jobs`` and
``/admin/dlq`` is sealed, and only a cursor this API sealed for the same caller is taken back.

Why: a page walks the job table newest first and stops after a budget of rows (see
`jobqueue.store.jobs.list_jobs`); its cursor is the id of the last row it examined, which for a
producer key is often another producer's job (issue 18: a producer read other producers' job ids,
and so their submission times, off its cursors). The position cannot be anything but a row of the
table, so the API encrypts it.

How: AES-256-GCM (authenticated encryption) of the 16 bytes of the id, a random 12-byte nonce,
and as associated data the caller's scope (``producer:<id>`` for a producer key, ``admin`` for
an admin key), so a cursor works only for the kind of caller it was made for and any change to it
is refused (422 naming ``cursor``). The text is URL-safe base64 of nonce, ciphertext and tag: 59
characters.

The key: derived (HMAC-SHA256) from ``jobqueue.api_secrets``'s ``cursor`` row, made at random by
migration 0023. It lives in the database because every API process must hold the same one — a
cursor made by one process of ``jobqueue api --workers N``, or on another host, is followed on
whichever process the next request reaches — and the database is what they already share, with
no setting to keep equal across hosts. Only the API and admin roles may read it. Each process
reads it again every `SECRET_TTL` seconds, so a rotated key (an ``UPDATE`` of that row) is used
everywhere within that time; cursors sealed under the old key are then refused like forged ones
(a client starts its listing again).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import uuid
from typing import Awaitable, Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from jobqueue.api.auth import Principal
from jobqueue.model.errors import NotMigrated, ValidationError
from jobqueue.runtime.refresh_ahead import RefreshAheadCache

#: The jobqueue.api_secrets row the key comes from.
SECRET_NAME = "cursor"
#: Seconds a process uses the key it read before reading it again (rotation takes this long).
SECRET_TTL = 60.0
_DERIVATION = b"jobqueue listing cursor v1"
_NONCE = 12
_SEALED = _NONCE + 16 + 16  # nonce, the id, the tag
_REFUSED = "must be the next_cursor of a previous page of this listing, for this API key's producer"


def scope_of(user: Principal) -> bytes:
    """What a cursor is bound to: the producer whose jobs the listing walks, or the admin role."""
    return b"admin" if user.is_admin else b"producer:" + user.producer_id.encode("utf-8", "surrogatepass")


class Cursors:
    """Seals and opens cursors with the key ``load(SECRET_NAME)`` returns (the secret's bytes, or
    None when the row is missing)."""

    def __init__(self, load: Callable[[str], Awaitable[bytes | None]], *, ttl: float = SECRET_TTL) -> None:
        self._load = load
        self._ciphers: RefreshAheadCache[str, AESGCM] = RefreshAheadCache(self._cipher_of, ttl, max_entries=1)

    async def _cipher_of(self, name: str) -> AESGCM | None:
        secret = await self._load(name)
        return None if secret is None else AESGCM(hmac.new(secret, _DERIVATION, hashlib.sha256).digest())

    async def _cipher(self) -> AESGCM:
        cipher = await self._ciphers.get(SECRET_NAME)
        if cipher is None:
            raise NotMigrated(
                f"jobqueue.api_secrets has no {SECRET_NAME!r} row (migration 0023 makes it): "
                f"INSERT INTO jobqueue.api_secrets (name, secret) VALUES ('{SECRET_NAME}', "
                "sha256((gen_random_uuid()::text || gen_random_uuid()::text)::bytea))"
            )
        return cipher

    async def seal(self, cursor: str | None, user: Principal) -> str | None:
        """The client's form of a store cursor (a job id), None staying None."""
        if cursor is None:
            return None
        nonce = os.urandom(_NONCE)
        sealed = nonce + (await self._cipher()).encrypt(nonce, uuid.UUID(cursor).bytes, scope_of(user))
        return base64.urlsafe_b64encode(sealed).rstrip(b"=").decode("ascii")

    async def open(self, token: str | None, user: Principal) -> str | None:
        """The store cursor inside a client's cursor; `ValidationError` (``cursor``) for anything
        this API did not seal for this caller."""
        if token is None:
            return None
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (binascii.Error, ValueError):
            raise ValidationError("cursor", _REFUSED) from None
        if len(raw) != _SEALED:
            raise ValidationError("cursor", _REFUSED)
        try:
            plain = (await self._cipher()).decrypt(raw[:_NONCE], raw[_NONCE:], scope_of(user))
        except InvalidTag:
            raise ValidationError("cursor", _REFUSED) from None
        return str(uuid.UUID(bytes=plain))
