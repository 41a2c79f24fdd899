"""Field-level payload encryption: AES-256-GCM under a data key per job, the data key wrapped by a
key-encryption key (KEK) from the `KeyRing` (envelope encryption).

An encrypted field's value, as stored in ``jobqueue.jobs.payload`` (and a task's encrypted result in
``jobqueue.job_results.result``), is one JSON object::

    {"$jobqueue_enc": 1, "kid": "k1", "dek": "<base64>", "nonce": "<base64>", "ct": "<base64>"}

- ``kid``: the id of the KEK that wrapped the data key;
- ``dek``: the 32-byte data key wrapped with AES key wrap (RFC 3394) under that KEK (40 bytes);
- ``nonce``: 12 random bytes, unique per value;
- ``ct``: AES-256-GCM of the UTF-8 JSON text of the field's value (a string is encrypted as its
  JSON, quotes included, so every type comes back as it went in), no associated data, the 16-byte
  tag appended — what `cryptography`'s ``AESGCM.encrypt`` returns.

A producer that encrypts by itself (SQL ``jobqueue.enqueue()``) writes exactly this object; the
docs/security.md shows how. Rotation re-wraps ``dek`` under the current KEK and leaves ``nonce``/``ct`` as
they are: the data is never decrypted to rotate.

Why a data key per job and not the KEK directly: a GCM nonce must never repeat under one key, and
random 96-bit nonces are safe for about 2^32 messages per key; a fresh key per job keeps every
KEK far from that bound, and rotation touches 40 bytes per value instead of the data.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import time
from typing import Any, Callable, Iterable, Mapping

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.keywrap import InvalidUnwrap, aes_key_unwrap, aes_key_wrap

from jobqueue.errors import EncryptionError, EncryptionKeyMissing, EncryptionUnavailable, ValidationError
from jobqueue.keyring import KeyRing

MARKER = "$jobqueue_enc"
VERSION = 1
ENVELOPE_FIELDS = frozenset({MARKER, "kid", "dek", "nonce", "ct"})
REDACTED = "[encrypted]"
#: Seconds a producer reuses the encrypted-field declarations workers published.
DECLARATIONS_TTL = 5.0


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any, name: str, where: str) -> bytes:
    if not isinstance(text, str):
        raise EncryptionError(f"encrypted value{where}: {name} must be a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise EncryptionError(f"encrypted value{where}: {name} is not valid base64") from None


def is_envelope(value: Any) -> bool:
    return isinstance(value, dict) and MARKER in value


class DataKey:
    """One job's data key, generated once and wrapped once under the ring's current KEK."""

    __slots__ = ("ring", "key", "wrapped")

    def __init__(self, ring: KeyRing) -> None:
        self.ring = ring
        self.key = AESGCM.generate_key(bit_length=256)
        self.wrapped = _b64(aes_key_wrap(ring.current_key, self.key))

    def seal_json(self, json_text: str) -> dict[str, Any]:
        nonce = os.urandom(12)
        return {MARKER: VERSION, "kid": self.ring.current_id, "dek": self.wrapped, "nonce": _b64(nonce),
                "ct": _b64(AESGCM(self.key).encrypt(nonce, json_text.encode("utf-8"), None))}


def seal_json(json_text: str, ring: KeyRing) -> dict[str, Any]:
    """The envelope of a value given as JSON text, under a data key of its own."""
    return DataKey(ring).seal_json(json_text)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def seal_fields(payload: Any, paths: Iterable[str], ring: KeyRing | None, *, field_prefix: str = "") -> Any:
    """A copy of ``payload`` with the field at each dotted path replaced by its envelope (one data
    key for all of them). A path whose field is missing is a `ValidationError` naming it; a field
    that is already an envelope (encrypted by the producer) is left as it is. ``payload`` itself
    is not changed."""
    paths = list(paths)
    if not paths:
        return payload
    if ring is None:
        raise EncryptionUnavailable(f"fields {paths} must be encrypted but this process has no encryption keys: "
                                    "set JOBQUEUE_ENCRYPTION_KEYS (or JOBQUEUE_ENCRYPTION_KEYS_FILE); nothing was written")
    data_key: DataKey | None = None
    for path in paths:
        parts = path.split(".")
        copied = payload = dict(payload) if isinstance(payload, dict) else payload
        for depth, part in enumerate(parts):
            if not isinstance(copied, dict) or part not in copied:
                raise ValidationError(f"{field_prefix}payload.{path}", "is to be encrypted but the payload has no "
                                      f"such field ({'.'.join(parts[:depth + 1])!r} is missing); nothing was written")
            if depth == len(parts) - 1:
                break
            inner = copied[part]
            copied[part] = dict(inner) if isinstance(inner, dict) else inner
            copied = copied[part]
        if is_envelope(copied[parts[-1]]):
            continue
        try:
            text = _dumps(copied[parts[-1]])
        except (TypeError, ValueError) as exc:
            raise ValidationError(f"{field_prefix}payload.{path}", f"must be JSON-serialisable ({exc})") from None
        data_key = data_key or DataKey(ring)
        copied[parts[-1]] = data_key.seal_json(text)
    return payload


def check_paths(paths: Any, field: str) -> tuple[str, ...]:
    """Field paths as given to ``encrypt=`` / ``encrypted=``: a list of dotted names."""
    if paths is None:
        return ()
    if isinstance(paths, str) or not isinstance(paths, (list, tuple, set, frozenset)):
        raise ValidationError(field, "must be a list of dotted field names, e.g. [\"card.number\", \"ssn\"]")
    for path in paths:
        if not isinstance(path, str) or not all(part.strip() for part in path.split(".")) or len(path) > 500:
            raise ValidationError(field, f"{path!r} is not a dotted field name (non-empty parts, at most 500 characters)")
    return tuple(dict.fromkeys(paths))


class _Unwrapper:
    """Unwraps data keys for one traversal, each wrapped key once (a job's fields share one)."""

    def __init__(self, ring: KeyRing | None) -> None:
        self.ring = ring
        self.keys: dict[tuple[str, str], bytes] = {}

    def data_key(self, envelope: dict, where: str) -> bytes:
        if set(envelope) != ENVELOPE_FIELDS or envelope[MARKER] != VERSION or not isinstance(envelope["kid"], str):
            raise EncryptionError(f"encrypted value{where} is malformed: it must hold exactly "
                                  f"{', '.join(sorted(ENVELOPE_FIELDS))} with {MARKER} = {VERSION}")
        kid, wrapped = envelope["kid"], envelope["dek"]
        cached = self.keys.get((kid, wrapped)) if isinstance(wrapped, str) else None
        if cached is not None:
            return cached
        kek = self.ring.get(kid) if self.ring is not None else None
        if kek is None:
            raise EncryptionKeyMissing(kid, where.strip(" ()") or "")
        try:
            key = aes_key_unwrap(kek, _unb64(wrapped, "dek", where))
        except InvalidUnwrap:
            raise EncryptionError(f"encrypted value{where}: its data key does not unwrap under key {kid!r} "
                                  "(a different key with the same id, or a damaged value)") from None
        self.keys[(kid, wrapped)] = key
        return key

    def open(self, envelope: dict, where: str) -> Any:
        key = self.data_key(envelope, where)
        nonce, ct = _unb64(envelope["nonce"], "nonce", where), _unb64(envelope["ct"], "ct", where)
        try:
            return json.loads(AESGCM(key).decrypt(nonce, ct, None))
        except InvalidTag:
            raise EncryptionError(f"encrypted value{where} fails authentication: it was altered, or its nonce or "
                                  "ciphertext do not belong together") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise EncryptionError(f"encrypted value{where} does not decrypt to JSON ({exc})") from None


def _transform(value: Any, change: Callable[[dict, str], Any], path: str = "") -> tuple[Any, bool]:
    """``value`` with every envelope replaced by ``change(envelope, path)``; copies only what
    changes, and says whether anything did."""
    if isinstance(value, dict):
        if MARKER in value:
            return change(value, path or "$"), True
        changed_any, out = False, {}
        for key, item in value.items():
            new, changed = _transform(item, change, f"{path}.{key}" if path else str(key))
            out[key] = new
            changed_any |= changed
        return (out, True) if changed_any else (value, False)
    if isinstance(value, list):
        results = [_transform(item, change, f"{path}[{i}]") for i, item in enumerate(value)]
        if any(changed for _, changed in results):
            return [new for new, _ in results], True
    return value, False


def open_payload(value: Any, ring: KeyRing | None) -> Any:
    """``value`` with every envelope in it decrypted (the value itself when it holds none).
    `EncryptionKeyMissing` names a key the ring lacks; `EncryptionError` a value that is damaged."""
    unwrapper = _Unwrapper(ring)
    return _transform(value, lambda envelope, path: unwrapper.open(envelope, f" at {path}"))[0]


def holds_envelope(value: Any) -> bool:
    return _transform(value, lambda envelope, path: envelope)[1]


def redact(value: Any) -> Any:
    """``value`` with every envelope shown as ``"[encrypted]"`` (what REST and the dashboard show)."""
    return _transform(value, lambda envelope, path: REDACTED)[0]


def rewrap(value: Any, ring: KeyRing) -> tuple[Any, bool]:
    """``value`` with each envelope's data key wrapped under the ring's current KEK (the data,
    nonce and ciphertext untouched; envelopes already under it unchanged), and whether any changed."""
    unwrapper = _Unwrapper(ring)
    rewrapped: dict[tuple[str, str], str] = {}

    def under_current(envelope: dict, path: str) -> dict:
        if envelope.get("kid") == ring.current_id:
            return envelope
        key = unwrapper.data_key(envelope, f" at {path}")
        wrapped = rewrapped.setdefault((envelope["kid"], envelope["dek"]), _b64(aes_key_wrap(ring.current_key, key)))
        return {**envelope, "kid": ring.current_id, "dek": wrapped}

    new, _ = _transform(value, under_current)
    return new, new != value


class Sealer:
    """What a producer (Python client, REST API) encrypts before a job reaches the database: the
    fields named in the call (``encrypt=``), plus the fields the job's task declared
    (``@queue.task(encrypted=[...])``) as workers publish them in ``jobqueue.task_defaults``, read
    at most every `DECLARATIONS_TTL` seconds (``learn``)."""

    def __init__(self, ring: KeyRing | None, *, ttl: float = DECLARATIONS_TTL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ring = ring
        self.ttl = ttl
        self._clock = clock
        self._declared: dict[str, tuple[str, ...]] = {}
        self._learned_at: float | None = None

    def stale(self) -> bool:
        return self._learned_at is None or self._clock() - self._learned_at >= self.ttl

    def learn(self, declared: Mapping[str, Iterable[str]]) -> None:
        self._declared = {job_type: tuple(fields) for job_type, fields in declared.items()}
        self._learned_at = self._clock()

    def seal(self, job_type: Any, payload: Any, encrypt: Any = None, *, field_prefix: str = "") -> Any:
        """``payload`` with the call's and the task's encrypted fields sealed."""
        paths = check_paths(encrypt, field_prefix + "encrypt")
        declared = self._declared.get(job_type, ()) if isinstance(job_type, str) else ()
        if declared:
            paths = tuple(dict.fromkeys(paths + declared))
        return seal_fields(payload, paths, self.ring, field_prefix=field_prefix) if paths else payload

    def seal_specs(self, specs: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """``enqueue_many`` job specs with their ``encrypt`` entries applied and removed."""
        sealed: list[Mapping[str, Any]] = []
        for index, spec in enumerate(specs):
            if isinstance(spec, Mapping) and ("encrypt" in spec or spec.get("job_type") in self._declared):
                fields = {k: v for k, v in spec.items() if k != "encrypt"}
                fields["payload"] = self.seal(spec.get("job_type"), spec.get("payload"), spec.get("encrypt"),
                                              field_prefix=f"jobs[{index}].")
                spec = fields
            sealed.append(spec)
        return sealed
