"""`jobqueue keys generate|rotate`: make a key-encryption key; re-wrap stored values under the current
one, and bind values sealed before migration 0025 to their jobs.

Rotation, step by step (docs/security.md "Payload encryption"):

1. ``jobqueue keys generate`` prints a new ``id:base64key`` entry;
2. list it first in ``JOBQUEUE_ENCRYPTION_KEYS`` everywhere (producers, API, workers), keeping the
   old keys after it: new jobs are encrypted under it, old ones still decrypt;
3. ``jobqueue keys rotate`` walks every job (all states: a completed job's payload and result are
   rewrapped too, so no stored value needs an old key afterwards) in batches of ``--batch-size``
   by ``seq``, and re-wraps each encrypted value's data key under the current key. The data itself
   is not decrypted: only the 40-byte wrapped key and the key id change. Each write is a
   compare-and-set on the value it read, so a rotation beside running workers and producers is
   safe, and running it again resumes (values already under the current key are skipped);
4. when it reports no value left under an old key, remove the old key.

Values it cannot re-wrap are left as they are and reported in three groups. Under a key id the ring
lacks but some rotation recorded in ``jobqueue.encryption_keys`` (every run records its ring's ids):
a key dropped too early — the command exits 1 naming the ids, so an operator never drops a key still
needed. Under an id no rotation ever recorded: never sealed by this deployment's keys (anyone who may
enqueue can write such an object), reported apart; exit 0. Damaged (malformed, or a data key that does
not unwrap): reported apart; exit 0, since no key would open them either.

Values of the unbound format of before 0025 (``"$jobqueue_enc": 1``, no associated data, never
opened by a worker any more) are bound to the job they sit in: opened and sealed again for its
producer, type, id and field, under the same data key. Not all of them are trusted: before 0025, a
reader of the table could copy another job's value into a job of its own, and binding the copy
would hand it the plaintext. A job's data key is fresh and its own, so a copy shares its data key
with the job it was copied from, which came first: a census pass first finds the data keys of the
unbound values, then the main pass (over every job holding any value while that census is not empty,
since a value bound by an earlier, interrupted run still holds its data key) binds an unbound value
only where no job before it in ``seq`` order holds the same data key. The rest (copies, and values
where no ``encrypt`` path can name a field, e.g. inside a list) stay unbound, re-wrapped only, and
reported; workers dead-letter their jobs. A dead-lettered job whose last attempt failed for holding
an unbound value, and whose values are now all bound, is put back to pending (as an admin retry
does). What the census cannot tell: a copy whose original job has since been pruned is the only
holder of its data key, and is bound — so bind once, right after every producer is upgraded.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from jobqueue.config import Settings
from jobqueue.crypto.envelopes import (
    MARKER,
    UNBOUND_VERSION,
    Binding,
    Rebinder,
    map_envelopes,
)
from jobqueue.crypto.field_paths import Parts, display, field_keys
from jobqueue.crypto.keyring import KeyRing, default_key_id, new_key_line
from jobqueue.db import gateway as db
from jobqueue.model.errors import EncryptionError, EncryptionKeyMissing, EncryptionUnavailable
from jobqueue.store import encryption_keys as key_store
from jobqueue.store import job_admin
from jobqueue.store.job_admin import StoredValues

DEFAULT_BATCH = 500
#: Job ids a report names per kind of value it left.
EXAMPLES = 3
UNBOUND_ERROR = "EncryptionUnbound"  # the error type a worker dead-letters an unbound value's job with


@dataclass
class RotationReport:
    key_id: str
    scanned: int = 0
    payloads: int = 0  # payloads written (re-wrapped, bound, or both)
    results: int = 0
    bound: int = 0  # values of the unbound format now bound to their job
    requeued: int = 0  # dead-lettered for holding one, now pending again
    missing: dict[str, int] = field(default_factory=dict)  # a recorded key id this ring lacks -> values left
    unknown: dict[str, int] = field(default_factory=dict)  # a key id no rotation ever recorded -> values left
    damaged: int = 0  # malformed or altered values, left as they were
    unbindable: int = 0  # unbound values left unbound: copies of an earlier job's, or not at a field
    examples: dict[str, list[str]] = field(default_factory=dict)  # kind of value left -> some of their jobs

    def note(self, kind: str, job: StoredValues) -> None:
        jobs = self.examples.setdefault(kind, [])
        if len(jobs) < EXAMPLES and str(job.id) not in jobs:
            jobs.append(str(job.id))

    def _jobs(self, kind: str) -> str:
        jobs = self.examples.get(kind, [])
        return f" (e.g. job{'s' if len(jobs) > 1 else ''} {', '.join(jobs)})" if jobs else ""

    def line(self) -> str:
        text = (
            f"re-wrapped {self.payloads} payloads and {self.results} results under key {self.key_id!r} "
            f"({self.scanned} jobs scanned)"
        )
        if self.bound:
            text += f"; bound {self.bound} values of the unbound format to their jobs"
        if self.requeued:
            text += f", and re-queued {self.requeued} jobs dead-lettered for holding one"
        if self.missing:
            keys = ", ".join(f"{kid!r} ({n} values)" for kid, n in sorted(self.missing.items()))
            text += (
                f"; left under keys this ring lacks: {keys}{self._jobs('missing')} — add them to the ring "
                "and run it again"
            )
        if self.unknown:
            keys = ", ".join(f"{kid!r} ({n} values)" for kid, n in sorted(self.unknown.items()))
            text += (
                f"; left under key ids no key ring here ever held: {keys}{self._jobs('unknown')} — not sealed "
                "by these keys (or by a key dropped before any rotation ran), no worker opens them"
            )
        if self.damaged:
            text += f"; {self.damaged} values are damaged and were left as they were{self._jobs('damaged')}"
        if self.unbindable:
            text += (
                f"; {self.unbindable} values of the unbound format were left unbound (copied from an earlier "
                f"job, or not at a field){self._jobs('unbindable')}: workers dead-letter their jobs"
            )
        return text

    @property
    def status(self) -> int:
        """1 while a value needs a key the ring once held: do not drop old keys yet."""
        return 1 if self.missing else 0


class _Pass:
    """One job's values in one pass: re-wrap, note data keys, bind what may be bound."""

    def __init__(
        self,
        ring: KeyRing,
        known: set[str],
        report: RotationReport,
        job: StoredValues,
        first_holder: dict[bytes, int] | None,
    ) -> None:
        self.rebinder = Rebinder(ring)
        self.known = known
        self.report = report
        self.job = job
        self.first_holder = first_holder  # data key digest -> lowest seq holding it (census mode)
        self.binding = Binding(job.producer_id, job.job_type, job.id)
        self.unbound_left = 0

    def failed(self, exc: EncryptionError) -> None:
        if isinstance(exc, EncryptionKeyMissing):
            group = self.report.missing if exc.key_id in self.known else self.report.unknown
            group[exc.key_id] = group.get(exc.key_id, 0) + 1
            self.report.note("missing" if exc.key_id in self.known else "unknown", self.job)
        else:
            self.report.damaged += 1
            self.report.note("damaged", self.job)

    def value(self, value: Any, result: bool) -> Any | None:
        """The value re-wrapped (and bound), or None when nothing in it changed."""
        if value is None:
            return None
        new, _ = map_envelopes(value, lambda envelope, parts: self.envelope(envelope, parts, result))
        return new if new != value else None

    def envelope(self, envelope: dict, parts: Parts, result: bool) -> dict:
        where = "result" if result else display(parts)
        try:
            unbound = envelope.get(MARKER) == UNBOUND_VERSION
            copied = False
            if self.first_holder is not None:
                digest = self.rebinder.digest(envelope, where)
                if digest in self.first_holder:
                    if not unbound:  # bound by an earlier run, which kept its data key
                        self.first_holder[digest] = min(self.first_holder[digest], self.job.seq)
                    copied = self.first_holder[digest] < self.job.seq
            if not unbound:
                return self.rebinder.rewrapped(envelope, where)
            keys = () if result else field_keys(parts)
            if keys is None or (copied and not result):  # results are written by workers only: never copies
                self.report.unbindable += 1
                self.report.note("unbindable", self.job)
                self.unbound_left += 1
                return self.rebinder.rewrapped(envelope, where)
            self.report.bound += 1
            return self.rebinder.bound(envelope, where, self.binding.result() if result else self.binding.field(keys))
        except EncryptionError as exc:
            self.failed(exc)
            self.unbound_left += envelope.get(MARKER) == UNBOUND_VERSION
            return envelope


def _batches(conn, ring: KeyRing, batch_size: int, holding: str):
    """Every job holding values of the kind ``holding`` names, a batch at a time, in seq order,
    with how many jobs each batch scanned."""
    after = 0
    while True:
        scanned, last_seq, found = db.run_sync(
            conn, job_admin.rewrap_scan(after=after, limit=batch_size, kid=ring.current_id, holding=holding)
        )
        yield scanned, found
        if scanned < batch_size or last_seq is None:
            return
        after = last_seq


def _census(conn, ring: KeyRing, batch_size: int) -> dict[bytes, int]:
    """The data keys of the unbound values (digests), each with the lowest seq holding it."""
    first_holder: dict[bytes, int] = {}
    for _, found in _batches(conn, ring, batch_size, "unbound"):
        for job in found:
            rebinder = Rebinder(ring)

            def note(envelope: dict, parts: Parts) -> dict:
                if envelope.get(MARKER) == UNBOUND_VERSION:
                    try:
                        first_holder.setdefault(rebinder.digest(envelope, display(parts)), job.seq)
                    except EncryptionError:
                        pass  # the main pass reports it
                return envelope

            map_envelopes(job.payload, note)
            map_envelopes(job.result, note)
    return first_holder


def rotate(conn, ring: KeyRing, *, batch_size: int = DEFAULT_BATCH) -> RotationReport:
    """Re-wrap every stored encrypted value under ``ring``'s current key (binding the unbound ones
    it may), a batch per transaction."""
    if batch_size < 1:
        raise ValueError("--batch-size must be at least 1")
    report = RotationReport(ring.current_id)
    known = db.run_sync(conn, key_store.record(ring.ids))
    census = _census(conn, ring, batch_size)
    first_holder = census or None
    for scanned, found in _batches(conn, ring, batch_size, "any" if census else "stale"):
        report.scanned += scanned
        payloads, results, revivable = [], [], set()
        for job in found:
            values = _Pass(ring, known, report, job, first_holder)
            new_result = values.value(job.result, result=True)
            if new_result is not None:
                results.append((job.id, job.result, new_result))
            bound_before = report.bound
            new_payload = values.value(job.payload, result=False)
            if new_payload is not None:
                payloads.append((job.id, job.payload, new_payload))
                if (
                    job.state == "dead_letter"
                    and job.last_error == UNBOUND_ERROR
                    and report.bound > bound_before
                    and not values.unbound_left
                ):
                    revivable.add(job.id)
        if payloads or results:
            written, done_results = db.run_sync(conn, job_admin.rewrap_write(payloads, results))
            report.payloads += len(written)
            report.results += done_results
            for job_id in revivable.intersection(written):
                report.requeued += db.run_sync(conn, job_admin.retry_dead(job_id)).value == "retried"
    return report


def add_keys_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="keys_command", required=True)
    p = commands.add_parser("generate", help="print a new random key entry (id:base64key) for JOBQUEUE_ENCRYPTION_KEYS")
    p.add_argument("--id", dest="key_id", help="the key's id (default: k + the UTC time + 4 random hex digits)")
    p = commands.add_parser(
        "rotate",
        help="re-wrap every stored encrypted value under the first (current) key, "
        "and bind values sealed before migration 0025 to their jobs",
    )
    p.add_argument(
        "--batch-size", type=int, default=DEFAULT_BATCH, help=f"jobs per transaction (default {DEFAULT_BATCH})"
    )
    p.add_argument("--dsn")


def run_keys(args: argparse.Namespace, settings: Settings) -> int:
    if args.keys_command == "generate":
        print(new_key_line(args.key_id or default_key_id()))
        return 0
    if settings.encryption.keys is None:
        raise EncryptionUnavailable(
            "jobqueue keys rotate needs the key ring: set JOBQUEUE_ENCRYPTION_KEYS (or "
            "JOBQUEUE_ENCRYPTION_KEYS_FILE), the new key first and the old ones after it"
        )
    with db.connect_sync(db.Session.of(settings.db, db.CLI_NAME)) as conn:
        report = rotate(conn, settings.encryption.keys, batch_size=args.batch_size)
    print(report.line())
    return report.status
