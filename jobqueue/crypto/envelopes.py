"""Field-level payload encryption: AES-256-GCM under a data key per job, the data key wrapped by a
key-encryption key (KEK) from the `KeyRing` (envelope encryption), and every value bound to the job
and field it was sealed for.

An encrypted field's value, as stored in ``jobqueue.jobs.payload`` (and a task's encrypted result in
``jobqueue.job_results.result``), is one JSON object::

    {"$jobqueue_enc": 2, "kid": "k1", "dek": "<base64>", "nonce": "<base64>", "ct": "<base64>"}

- ``kid``: the id of the KEK that wrapped the data key;
- ``dek``: the 32-byte data key wrapped with AES key wrap (RFC 3394) under that KEK (40 bytes);
- ``nonce``: 12 random bytes, unique per value;
- ``ct``: AES-256-GCM of the UTF-8 JSON text of the field's value (a string is encrypted as its
  JSON, quotes included, so every type comes back as it went in), the 16-byte tag appended — what
  `cryptography`'s ``AESGCM.encrypt`` returns — with associated data naming what it was sealed for
  (`Binding`), UTF-8, its parts joined by NUL::

      jobqueue/2 NUL payload NUL <producer id, or nothing> NUL <job type> NUL <job id> NUL <key> [NUL <key> ...]
      jobqueue/2 NUL result NUL <producer id, or nothing> NUL <job type> NUL <job id>

  (the keys of the field's path from the payload's root: ``card.number`` is ``card`` NUL ``number``;
  the id in its usual lowercase text form). No PostgreSQL text, hence no job type, producer id or
  JSON key, can hold NUL, so no two bindings share associated data.

Why bound: anyone who can read the table (a replica, a dump, ``jobqueue_readonly``) and submit a job
(any producer credential) could otherwise copy another producer's ciphertext into a job of their own
and have a worker open it for them. A worker opens a value only with the associated data of the job
and the place it finds it in (`open_payload`): a copy — into another job, another producer's, another
job type, another field, or a result as a field — fails GCM's authentication, and the job is
dead-lettered unopened (`EncryptionMismatch`); so does a value anywhere no ``encrypt`` path can name
(inside a list, or the payload itself). The fields a worker opens are thus exactly those sealed for
the job: its task's declared fields and its own ``encrypt`` list, both sealed the same way, the list
authenticated in each value rather than stored beside it.

The job id is bound too, so a copy into a new job of the same producer (a stolen key replaying a
ciphertext) fails as well. The database assigns ids at the INSERT, after sealing, so a producer
that seals makes the job's id itself — a time-ordered UUID, version 7, as ``jobqueue.uuid_v7()``
makes them (`new_job_id`) — and passes it to ``enqueue_many``, which takes an ``id`` made within an
hour of the database's clock (migration 0025: an id can neither collide with a live job, the key
refuses it, nor be reused once its job is pruned, it is too old by then).

Format version 1 (before migration 0025) had no associated data: a worker never opens it
(`EncryptionUnbound`), and ``jobqueue keys rotate`` binds each such value to the job it is in
(`Rebinder`; `jobqueue.cli.keys` says which ones it trusts). Rotation re-wraps ``dek`` under the
current KEK and leaves ``nonce``/``ct`` as they are: the data is not decrypted to rotate.

Why a data key per job and not the KEK directly: a GCM nonce must never repeat under one key, and
random 96-bit nonces are safe for about 2^32 messages per key; a fresh key per job keeps every
KEK far from that bound, and rotation touches 40 bytes per value instead of the data.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.keywrap import InvalidUnwrap, aes_key_unwrap, aes_key_wrap

from jobqueue.crypto.field_paths import (
    MAX_PATHS,
    Branch,
    Leaf,
    Parts,
    check_paths,
    display,
    field_keys,
    missing_field,
    path_tree,
)
from jobqueue.crypto.keyring import KeyRing
from jobqueue.model.errors import (
    EncryptionError,
    EncryptionKeyMissing,
    EncryptionMismatch,
    EncryptionUnavailable,
    EncryptionUnbound,
    ValidationError,
)

MARKER = "$jobqueue_enc"
VERSION = 2  # bound: associated data names the job and the field
UNBOUND_VERSION = 1  # sealed before migration 0025, without associated data
ENVELOPE_FIELDS = frozenset({MARKER, "kid", "dek", "nonce", "ct"})
REDACTED = "[encrypted]"
#: Seconds a producer reuses the encrypted-field declarations workers published.
DECLARATIONS_TTL = 5.0
#: Encrypted values a payload may hold, at most what its two lists could name: past it, a worker
#: refuses the job before opening any.
MAX_VALUES = 2 * MAX_PATHS
_LABEL = "jobqueue/2"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any, name: str, where: str) -> bytes:
    if not isinstance(text, str):
        raise EncryptionError(f"encrypted value at {where}: {name} must be a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise EncryptionError(f"encrypted value at {where}: {name} is not valid base64") from None


def is_envelope(value: Any) -> bool:
    return isinstance(value, dict) and MARKER in value


def new_job_id() -> uuid.UUID:
    """A version-7 UUID made now (RFC 9562: Unix milliseconds, then 74 random bits), as the
    database's ``jobqueue.uuid_v7()`` makes job ids: the id a producer gives a job it seals for."""
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    return uuid.UUID(
        int=(millis & 0xFFFF_FFFF_FFFF) << 80
        | 0x7 << 76
        | (rand >> 62 & 0xFFF) << 64
        | 0b10 << 62
        | rand & ((1 << 62) - 1)
    )


@dataclass(frozen=True, slots=True)
class Binding:
    """What a job's values are sealed for: its producer (None and "" alike: none, as the
    idempotency keys scope them), its job type and its id."""

    producer_id: str | None
    job_type: str
    job_id: uuid.UUID

    def field(self, keys: Sequence[str]) -> bytes:
        """The associated data of the payload field at ``keys`` (its path from the root)."""
        return self._data("payload", keys)

    def result(self) -> bytes:
        return self._data("result", ())

    def _data(self, kind: str, keys: Sequence[str]) -> bytes:
        return "\x00".join((_LABEL, kind, self.producer_id or "", self.job_type, str(self.job_id), *keys)).encode()

    def describe(self) -> str:
        return f"producer {self.producer_id!r}, job type {self.job_type!r}, job {self.job_id}"


class DataKey:
    """One job's data key (fresh, or one being re-sealed), wrapped once under the ring's current KEK."""

    __slots__ = ("kid", "wrapped", "_aead")

    def __init__(self, ring: KeyRing, key: bytes | None = None) -> None:
        key = key or AESGCM.generate_key(bit_length=256)
        self.kid = ring.current_id
        self.wrapped = _b64(aes_key_wrap(ring.current_key, key))
        self._aead = AESGCM(key)

    def seal(self, plaintext: bytes, associated_data: bytes) -> dict[str, Any]:
        nonce = os.urandom(12)
        return {
            MARKER: VERSION,
            "kid": self.kid,
            "dek": self.wrapped,
            "nonce": _b64(nonce),
            "ct": _b64(self._aead.encrypt(nonce, plaintext, associated_data)),
        }


def seal_result(json_text: str, ring: KeyRing, binding: Binding) -> dict[str, Any]:
    """A handler's result (as JSON text) sealed for its job, under a data key of its own."""
    return DataKey(ring).seal(json_text.encode("utf-8"), binding.result())


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def seal_fields(
    payload: Any, paths: Sequence[str], ring: KeyRing | None, binding: Binding, *, field_prefix: str = ""
) -> Any:
    """A copy of ``payload`` with the field at each dotted path replaced by its envelope, sealed for
    ``binding`` and that field, one data key for all of them — in one walk: only the objects on the
    paths are copied, once each (a copy of the payload per path made 30,000 paths cost 20 s). A path
    whose field is missing is a `ValidationError` naming it; a field that is already an envelope
    (the producer sealed it) is left as it is. ``payload`` itself is not changed."""
    if not paths:
        return payload
    if ring is None:
        raise EncryptionUnavailable(
            f"fields {list(paths)} must be encrypted but this process has no encryption keys: "
            "set JOBQUEUE_ENCRYPTION_KEYS (or JOBQUEUE_ENCRYPTION_KEYS_FILE); nothing was written"
        )
    data_key: list[DataKey] = []  # made when the first value needs it

    def seal(value: Any, path: str) -> dict[str, Any]:
        try:
            text = _dumps(value)
        except (TypeError, ValueError) as exc:
            raise ValidationError(f"{field_prefix}payload.{path}", f"must be JSON-serialisable ({exc})") from None
        if not data_key:
            data_key.append(DataKey(ring))
        return data_key[0].seal(text.encode("utf-8"), binding.field(path.split(".")))

    def walk(value: dict, tree: dict[str, Leaf | Branch], depth: int) -> dict:
        out = dict(value)
        for key, node in tree.items():
            if key not in out:
                raise missing_field(node.path, depth, field_prefix)
            if isinstance(node, Leaf):
                if not is_envelope(out[key]):
                    out[key] = seal(out[key], node.path)
            elif isinstance(out[key], dict):
                out[key] = walk(out[key], node.children, depth + 1)
            else:
                raise missing_field(node.path, depth + 1, field_prefix)
        return out

    if not isinstance(payload, dict):
        raise missing_field(paths[0], 0, field_prefix)
    return walk(payload, path_tree(paths), 0)


class _Unwrapper:
    """Unwraps data keys for one traversal, each wrapped key once (a job's fields share one)."""

    def __init__(self, ring: KeyRing | None) -> None:
        self.ring = ring
        self.keys: dict[tuple[str, str], bytes] = {}

    def data_key(self, envelope: dict, where: str) -> bytes:
        if (
            set(envelope) != ENVELOPE_FIELDS
            or envelope[MARKER] not in (UNBOUND_VERSION, VERSION)
            or type(envelope[MARKER]) is not int
            or not isinstance(envelope["kid"], str)
        ):
            raise EncryptionError(
                f"encrypted value at {where} is malformed: it must hold exactly "
                f"{', '.join(sorted(ENVELOPE_FIELDS))} with {MARKER} = {VERSION}"
            )
        kid, wrapped = envelope["kid"], envelope["dek"]
        cached = self.keys.get((kid, wrapped)) if isinstance(wrapped, str) else None
        if cached is not None:
            return cached
        kek = self.ring.get(kid) if self.ring is not None else None
        if kek is None:
            raise EncryptionKeyMissing(kid, where)
        try:
            key = aes_key_unwrap(kek, _unb64(wrapped, "dek", where))
        except InvalidUnwrap:
            raise EncryptionError(
                f"encrypted value at {where}: its data key does not unwrap under key {kid!r} "
                "(a different key with the same id, or a damaged value)"
            ) from None
        self.keys[(kid, wrapped)] = key
        return key

    def decrypt(self, envelope: dict, where: str, associated_data: bytes | None) -> bytes:
        """The plaintext; `InvalidTag` when it was sealed with other associated data, or altered."""
        key = self.data_key(envelope, where)
        return AESGCM(key).decrypt(
            _unb64(envelope["nonce"], "nonce", where), _unb64(envelope["ct"], "ct", where), associated_data
        )


def _loads(plaintext: bytes, where: str) -> Any:
    try:
        return json.loads(plaintext)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EncryptionError(f"encrypted value at {where} does not decrypt to JSON ({exc})") from None


def map_envelopes(value: Any, change: Callable[[dict, Parts], Any], parts: Parts = ()) -> tuple[Any, bool]:
    """``value`` with every envelope replaced by ``change(envelope, parts)``; copies only what
    changes, and says whether anything did."""
    if isinstance(value, dict):
        if MARKER in value:
            return change(value, parts), True
        changed_any, out = False, {}
        for key, item in value.items():
            new, changed = map_envelopes(item, change, (*parts, key))
            out[key] = new
            changed_any |= changed
        return (out, True) if changed_any else (value, False)
    if isinstance(value, list):
        results = [map_envelopes(item, change, (*parts, i)) for i, item in enumerate(value)]
        if any(changed for _, changed in results):
            return [new for new, _ in results], True
    return value, False


def open_payload(value: Any, ring: KeyRing | None, binding: Binding) -> Any:
    """``value`` (a job's payload) with every envelope in it opened (the value itself when it holds
    none). Each must be sealed for ``binding`` at the field it sits in: `EncryptionMismatch`
    otherwise, and for more than `MAX_VALUES` of them; `EncryptionUnbound` for the format of
    before 0025; `EncryptionKeyMissing` names a key the ring lacks; `EncryptionError` a damaged value."""
    unwrapper = _Unwrapper(ring)
    opened = [0]

    def open_one(envelope: dict, parts: Parts) -> Any:
        where = display(parts)
        opened[0] += 1
        if opened[0] > MAX_VALUES:
            raise EncryptionMismatch(
                f"the payload holds more than {MAX_VALUES} encrypted values, more than a job's "
                "encrypt list and its task's declared fields can name: none was opened"
            )
        if envelope.get(MARKER) == UNBOUND_VERSION and set(envelope) == ENVELOPE_FIELDS:
            raise EncryptionUnbound(
                f"encrypted value at {where} is in the format of before migration 0025 "
                f"({MARKER}: {UNBOUND_VERSION}), bound to no job, so it is not opened: "
                "`jobqueue keys rotate` binds such values to their jobs and re-queues this one"
            )
        keys = field_keys(parts)
        if keys is None:
            unwrapper.data_key(envelope, where)  # a malformed one says so first
            raise EncryptionMismatch(
                f"encrypted value at {where} was not sealed for this job: values are sealed "
                "for object fields only (an encrypt path), never inside a list or as the payload"
            )
        try:
            return _loads(unwrapper.decrypt(envelope, where, binding.field(keys)), where)
        except InvalidTag:
            raise EncryptionMismatch(
                f"encrypted value at {where} was not sealed for this job ({binding.describe()}, "
                f"field {'.'.join(keys)}), or was altered: a value copied from another job or "
                "field is never opened"
            ) from None

    return map_envelopes(value, open_one)[0]


def open_result(value: Any, ring: KeyRing | None, binding: Binding) -> Any:
    """A stored result, opened when it is an envelope (``encrypt_result`` seals the whole result):
    bound to its job's result, or in the format of before 0025 (only workers write results, so a
    value there is one a worker sealed). Anything else is returned as stored."""
    if not is_envelope(value):
        return value
    unwrapper = _Unwrapper(ring)
    unwrapper.data_key(value, "result")
    try:
        return _loads(
            unwrapper.decrypt(value, "result", binding.result() if value[MARKER] == VERSION else None), "result"
        )
    except InvalidTag:
        raise EncryptionMismatch(
            f"the encrypted result was not sealed for this job ({binding.describe()}), or was altered"
        ) from None


def holds_envelope(value: Any) -> bool:
    return map_envelopes(value, lambda envelope, parts: envelope)[1]


def redact(value: Any) -> Any:
    """``value`` with every envelope shown as ``"[encrypted]"`` (what REST and the dashboard show)."""
    if not isinstance(value, (dict, list)):  # nothing to look into (a created job's result is None)
        return value
    return map_envelopes(value, lambda envelope, parts: REDACTED)[0]


class Rebinder:
    """What `jobqueue keys rotate` does to stored values, one traversal's worth (data keys are
    unwrapped once each): re-wrap a data key under the ring's current KEK without touching the data
    (`rewrapped`), tell data keys apart (`digest`), and bind a value of the unbound format to the
    job it sits in (`bound`): opened without associated data, sealed again with its binding under
    the same data key, so a copy of the old value elsewhere still shares that key with it."""

    def __init__(self, ring: KeyRing) -> None:
        self.ring = ring
        self._unwrapper = _Unwrapper(ring)
        self._wrapped: dict[tuple[str, str], str] = {}

    def digest(self, envelope: dict, where: str) -> bytes:
        """16 bytes naming the data key (never the key): equal for the values sharing one."""
        return hashlib.sha256(self._unwrapper.data_key(envelope, where)).digest()[:16]

    def rewrapped(self, envelope: dict, where: str) -> dict:
        if envelope.get("kid") == self.ring.current_id:
            return envelope
        key = self._unwrapper.data_key(envelope, where)
        wrapped = self._wrapped.setdefault(
            (envelope["kid"], envelope["dek"]), _b64(aes_key_wrap(self.ring.current_key, key))
        )
        return {**envelope, "kid": self.ring.current_id, "dek": wrapped}

    def bound(self, envelope: dict, where: str, associated_data: bytes) -> dict:
        try:
            plaintext = self._unwrapper.decrypt(envelope, where, None)
        except InvalidTag:
            raise EncryptionError(
                f"encrypted value at {where} fails authentication: it was altered, or its nonce "
                "or ciphertext do not belong together"
            ) from None
        key = self._unwrapper.data_key(envelope, where)
        return DataKey(self.ring, key).seal(plaintext, associated_data)


def rewrap(value: Any, ring: KeyRing) -> tuple[Any, bool]:
    """``value`` with each envelope's data key wrapped under the ring's current KEK (the data,
    nonce and ciphertext untouched; envelopes already under it unchanged), and whether any changed."""
    rebinder = Rebinder(ring)
    new, _ = map_envelopes(value, lambda envelope, parts: rebinder.rewrapped(envelope, display(parts)))
    return new, new != value


class Sealer:
    """What a producer (Python client, REST API) encrypts before a job reaches the database: the
    fields named in the call (``encrypt=``), plus the fields the job's task declared
    (``@queue.task(encrypted=[...])``) as workers publish them in ``jobqueue.task_defaults``, read
    at most every `DECLARATIONS_TTL` seconds (``learn``). The client seals each job once it is
    validated, for its producer, type and id (`seal`)."""

    def __init__(
        self, ring: KeyRing | None, *, ttl: float = DECLARATIONS_TTL, clock: Callable[[], float] = time.monotonic
    ) -> None:
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

    def paths(self, job_type: Any, encrypt: Any = None, *, field_prefix: str = "") -> tuple[str, ...]:
        """The call's and the task's encrypted fields (checked: `ValidationError`; none at all
        without keys: `EncryptionUnavailable`)."""
        paths = check_paths(encrypt, field_prefix + "encrypt")
        declared = self._declared.get(job_type, ()) if isinstance(job_type, str) else ()
        if declared:
            paths = tuple(dict.fromkeys(paths + declared))
        if paths and self.ring is None:
            raise EncryptionUnavailable(
                f"fields {list(paths)} must be encrypted but this process has no encryption "
                "keys: set JOBQUEUE_ENCRYPTION_KEYS (or JOBQUEUE_ENCRYPTION_KEYS_FILE); nothing "
                "was written"
            )
        return paths

    def plan(
        self, specs: Iterable[Mapping[str, Any]]
    ) -> tuple[list[Mapping[str, Any]], list[tuple[int, tuple[str, ...], str]]]:
        """``enqueue_many`` job specs without their ``encrypt`` entries, and (index, paths, how an
        error names the job's fields) of the jobs that have fields to seal."""
        cleaned: list[Mapping[str, Any]] = []
        planned: list[tuple[int, tuple[str, ...], str]] = []
        for index, spec in enumerate(specs):
            if (
                (type(spec) is dict or isinstance(spec, Mapping))  # a dict passes before the costly ABC check
                and ("encrypt" in spec or spec.get("job_type") in self._declared)
            ):
                prefix = f"jobs[{index}]."
                paths = self.paths(spec.get("job_type"), spec.get("encrypt"), field_prefix=prefix)
                if paths:
                    planned.append((index, paths, prefix))
                if "encrypt" in spec:
                    spec = {k: v for k, v in spec.items() if k != "encrypt"}
            cleaned.append(spec)
        return cleaned, planned

    def seal(self, payload: Any, paths: Sequence[str], binding: Binding, *, field_prefix: str = "") -> Any:
        return seal_fields(payload, paths, self.ring, binding, field_prefix=field_prefix)
