"""The key-encryption keys (KEKs) of payload encryption, read from configuration (stdlib only).

``JOBQUEUE_ENCRYPTION_KEYS="k2:BASE64,k1:BASE64"`` or ``JOBQUEUE_ENCRYPTION_KEYS_FILE=/path``
(one ``id:BASE64`` per line, ``#`` comments): each key is 32 random bytes (AES-256), base64. The
first key encrypts; every listed key decrypts, so rotating is "list the new key first, run
``jobqueue keys rotate``, then drop the old one". Key ids are stored beside every encrypted value,
which is why they are short, printable and unique. A ring that cannot be parsed is a `ValueError`
naming the variable and the entry, raised when `Settings.from_env()` runs — at the start of a
worker, an API or a command, never later on the first job.

This module only parses and holds keys; `jobqueue.crypto.envelopes` does the cryptography.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import os
import re
import secrets
from typing import Mapping

ENV_KEYS = "JOBQUEUE_ENCRYPTION_KEYS"
ENV_KEYS_FILE = "JOBQUEUE_ENCRYPTION_KEYS_FILE"
KEY_BYTES = 32  # AES-256
_KEY_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class KeyRing:
    """Named KEKs in order: the first encrypts (``current_id``), all decrypt. Its repr names the
    ids only, so a logged `Settings` never shows a key."""

    __slots__ = ("_keys", "current_id")

    def __init__(self, keys: list[tuple[str, bytes]]) -> None:
        if not keys:
            raise ValueError("a key ring needs at least one key")
        self._keys = dict(keys)
        self.current_id = keys[0][0]

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(self._keys)

    @property
    def current_key(self) -> bytes:
        return self._keys[self.current_id]

    def get(self, key_id: str) -> bytes | None:
        return self._keys.get(key_id)

    def __repr__(self) -> str:
        return f"KeyRing(ids={list(self._keys)!r}, current={self.current_id!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KeyRing) and list(self._keys.items()) == list(other._keys.items())

    def __hash__(self) -> int:
        return hash(tuple(self._keys))

    @classmethod
    def parse(cls, text: str, source: str) -> "KeyRing":
        """``id:BASE64`` entries separated by commas or newlines; ``#`` starts a comment.
        ``source`` names where the text came from in error messages."""
        keys: list[tuple[str, bytes]] = []
        for line in text.splitlines():
            for entry in line.split("#", 1)[0].split(","):
                entry = entry.strip()
                if entry:
                    keys.append(_parse_entry(entry, source, [kid for kid, _ in keys]))
        if not keys:
            raise ValueError(f"{source} lists no keys (expected id:base64key entries)")
        return cls(keys)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "KeyRing | None":
        """The ring configured in ``env``, or None when neither variable is set."""
        inline, path = env.get(ENV_KEYS, "").strip(), env.get(ENV_KEYS_FILE, "").strip()
        if inline and path:
            raise ValueError(f"set {ENV_KEYS} or {ENV_KEYS_FILE}, not both")
        if path:
            try:
                with open(path, encoding="utf-8") as handle:
                    text = handle.read()
            except OSError as exc:
                raise ValueError(f"{ENV_KEYS_FILE}: cannot read {path!r} ({exc.strerror or exc})") from None
            return cls.parse(text, f"{ENV_KEYS_FILE} ({path})")
        return cls.parse(inline, ENV_KEYS) if inline else None


def _parse_entry(entry: str, source: str, seen: list[str]) -> tuple[str, bytes]:
    key_id, sep, encoded = entry.partition(":")
    key_id, encoded = key_id.strip(), encoded.strip()
    if not sep or not encoded:
        raise ValueError(f"{source}: entry {key_id or entry!r} must look like id:base64key")
    if not _KEY_ID.fullmatch(key_id):
        raise ValueError(f"{source}: key id {key_id!r} must be 1 to 64 of A-Z a-z 0-9 _ . -")
    if key_id in seen:
        raise ValueError(f"{source}: key id {key_id!r} is listed twice")
    try:
        key = base64.b64decode(encoded.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{source}: key {key_id!r} is not valid base64") from None
    if len(key) != KEY_BYTES:
        raise ValueError(
            f"{source}: key {key_id!r} is {len(key)} bytes; it must be {KEY_BYTES} random bytes "
            "(AES-256), base64-encoded — `jobqueue keys generate` makes one"
        )
    return key_id, key


def new_key_line(key_id: str) -> str:
    """A fresh ``id:base64key`` entry of 32 random bytes (what `jobqueue keys generate` prints)."""
    if not _KEY_ID.fullmatch(key_id):
        raise ValueError(f"key id {key_id!r} must be 1 to 64 of A-Z a-z 0-9 _ . -")
    return f"{key_id}:{base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()}"


def default_key_id() -> str:
    """A new key's id when none is given: ``k``, the UTC time and 4 random hex digits."""
    return "k" + datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d%H%M%S") + os.urandom(2).hex()
