"""`jobqueue keys generate|rotate`: make a key-encryption key; re-wrap stored values under the current one.

Rotation, step by step (docs/security.md "Payload encryption"):

1. ``jobqueue keys generate`` prints a new ``id:base64key`` entry;
2. list it first in ``JOBQUEUE_ENCRYPTION_KEYS`` everywhere (producers, API, workers), keeping the
   old keys after it: new jobs are encrypted under it, old ones still decrypt;
3. ``jobqueue keys rotate`` walks every job (all states: a completed job's payload and result are
   rewrapped too, so no stored value needs an old key afterwards) in batches of ``--batch-size``
   by ``seq``, and re-wraps each encrypted value's data key under the current key. The data itself
   is never decrypted: only the 40-byte wrapped key and the key id change. Each write is a
   compare-and-set on the value it read, so a rotation beside running workers and producers is
   safe, and running it again resumes (values already under the current key are skipped);
4. when it reports no value left under an old key, remove the old key.

A value under a key the ring does not hold cannot be re-wrapped: it is left as it is, counted, and
the command ends with status 1 naming the key ids, so an operator never drops a key still needed
(a damaged value — malformed, or its data key does not unwrap — is counted and left too).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from jobqueue import db
from jobqueue.config import Settings
from jobqueue.encryption import rewrap
from jobqueue.errors import EncryptionError, EncryptionKeyMissing, EncryptionUnavailable
from jobqueue.keyring import KeyRing, default_key_id, new_key_line
from jobqueue.store import jobs as job_store

DEFAULT_BATCH = 500


@dataclass
class RotationReport:
    key_id: str
    scanned: int = 0
    payloads: int = 0
    results: int = 0
    missing: dict[str, int] = field(default_factory=dict)  # key id the ring lacks → values left as they were
    damaged: int = 0  # values holding a malformed or altered encrypted value, left as they were

    def line(self) -> str:
        text = (f"re-wrapped {self.payloads} payloads and {self.results} results under key {self.key_id!r} "
                f"({self.scanned} jobs scanned)")
        if self.missing:
            keys = ", ".join(f"{kid!r} ({n} values)" for kid, n in sorted(self.missing.items()))
            text += f"; left under keys this ring lacks: {keys} — add them to the ring and run it again"
        if self.damaged:
            text += f"; {self.damaged} values hold a damaged encrypted value and were left as they were"
        return text


def _rewrapped(value: Any, ring: KeyRing, report: RotationReport) -> Any | None:
    """The value re-wrapped, or None when it needs nothing (or holds a key the ring lacks)."""
    if value is None:
        return None
    try:
        new, changed = rewrap(value, ring)
    except EncryptionKeyMissing as exc:
        report.missing[exc.key_id] = report.missing.get(exc.key_id, 0) + 1
        return None
    except EncryptionError:
        report.damaged += 1
        return None
    return new if changed else None


def rotate(conn, ring: KeyRing, *, batch_size: int = DEFAULT_BATCH) -> RotationReport:
    """Re-wrap every stored encrypted value under ``ring``'s current key, a batch per transaction."""
    if batch_size < 1:
        raise ValueError("--batch-size must be at least 1")
    report = RotationReport(ring.current_id)
    after = 0
    while True:
        scanned, last_seq, stale = db.run_sync(conn, job_store.rewrap_scan(after=after, limit=batch_size,
                                                                            kid=ring.current_id))
        report.scanned += scanned
        payloads, results = [], []
        for job_id, payload, result in stale:
            new_payload = _rewrapped(payload, ring, report)
            if new_payload is not None:
                payloads.append((job_id, payload, new_payload))
            new_result = _rewrapped(result, ring, report)
            if new_result is not None:
                results.append((job_id, result, new_result))
        if payloads or results:
            done_payloads, done_results = db.run_sync(conn, job_store.rewrap_write(payloads, results))
            report.payloads += done_payloads
            report.results += done_results
        if scanned < batch_size or last_seq is None:
            return report
        after = last_seq


def add_keys_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="keys_command", required=True)
    p = commands.add_parser("generate", help="print a new random key entry (id:base64key) for JOBQUEUE_ENCRYPTION_KEYS")
    p.add_argument("--id", dest="key_id", help="the key's id (default: k + the UTC time + 4 random hex digits)")
    p = commands.add_parser("rotate", help="re-wrap every stored encrypted value under the first (current) key")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH, help=f"jobs per transaction (default {DEFAULT_BATCH})")
    p.add_argument("--dsn")


def run_keys(args: argparse.Namespace, settings: Settings) -> int:
    if args.keys_command == "generate":
        print(new_key_line(args.key_id or default_key_id()))
        return 0
    if settings.encryption_keys is None:
        raise EncryptionUnavailable("jobqueue keys rotate needs the key ring: set JOBQUEUE_ENCRYPTION_KEYS (or "
                                    "JOBQUEUE_ENCRYPTION_KEYS_FILE), the new key first and the old ones after it")
    with db.connect_sync(db.Session.of(settings, db.CLI_NAME)) as conn:
        report = rotate(conn, settings.encryption_keys, batch_size=args.batch_size)
    print(report.line())
    return 1 if report.missing or report.damaged else 0
