"""Judging a scenario from its database, and the campaign's one table.

What the columns mean (docs/high-availability.md "Fault campaign" says the same):
- **lost**: a job id a producer got back that is not in its expected end state when the scenario
  is over (``completed``; ``dead_letter`` for poison), or that is not stored at all.
- **duplicates**: handler runs of a logical job beyond the ones it should have had — one, plus
  one more after each run that failed on purpose (poison), up to its max attempts. A job stored
  twice for one idempotency key counts as one logical job, so its second run is a duplicate too.
  **allowed**: of those, the ones at-least-once delivery permits: at most one more run per fault
  that hit the job while it was held (a killed or stopped worker's leased jobs; for database
  faults, the jobs in processing just before the fault or just after recovery).
- **wrong**: jobs whose end state contradicts their runs: completed with a result from another
  attempt than the one that finished it (a late ack that changed something), completed without
  a result or a run, or dead-lettered with a completed result.
- **recovery**: for each fault, from the moment it was injected until every job it hit had
  reached its end state (or, when it hit none, until the next job finished), and for producer
  faults until each producer path had a submission accepted again; the slowest fault is shown.
"""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TypeVar

from tests.harness.faults.store import JobOutcome

Ordered = TypeVar("Ordered", float, datetime)

END_STATES = ("completed", "dead_letter", "cancelled")


@dataclass
class Fault:
    what: str  # "SIGKILL worker-2 (pid 1234)", "restart -m immediate"
    at: datetime
    held: set[uuid.UUID] = field(default_factory=set)
    producers: bool = False  # producers submitted through it: recovery waits for their next success
    service_back: datetime | None = None  # when every producer path had a submission accepted again

    def as_dict(self, held_ids: bool = False) -> dict:
        held = sorted(map(str, self.held)) if held_ids else len(self.held)
        return {
            "what": self.what,
            "at": self.at.isoformat(),
            "held": held,
            "service_back": self.service_back.isoformat() if self.service_back else None,
        }


@dataclass
class Run:
    """What a scenario did and saw, before its database is judged."""

    name: str
    expected: dict[uuid.UUID, str] = field(default_factory=dict)  # accepted id -> end state it must reach
    faults: list[Fault] = field(default_factory=list)
    min_faults: int = 0  # fewer faults than this (the drain ended first) proves nothing: a failure
    refused_keys: set[str] = field(default_factory=set)  # logical jobs enqueue had to refuse (nothing stored)
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # what fails it besides lost/duplicates/wrong
    wedged: str | None = None
    logs: str = ""


@dataclass
class Row:
    scenario: str
    jobs: int
    lost: int
    duplicates: int
    allowed: int
    wrong: int
    recovery: float | None  # seconds, slowest fault; None: no fault, or one never recovered
    status: str  # ok | FAIL | WEDGED
    notes: str
    faults: list[dict] = field(default_factory=list)
    logs: str = ""  # the scenario's worker/API logs and faults.json (every fault with the ids it held)

    @property
    def passed(self) -> bool:
        return self.status == "ok"

    def as_dict(self) -> dict:
        return asdict(self)


def latest(values: list[Ordered | None]) -> Ordered | None:
    """The largest value, or None when there is none or any is unknown (an outcome not reached)."""
    known = [value for value in values if value is not None]
    return max(known) if known and len(known) == len(values) else None


def _seconds(later: datetime | None, earlier: datetime) -> float | None:
    return None if later is None else max((later - earlier).total_seconds(), 0.0)


def _recovery(fault: Fault, outcomes: dict[uuid.UUID, JobOutcome], finishes: list[datetime]) -> float | None:
    """Seconds from the fault until what it hit is back; None when that never happened."""
    backs: list[float | None] = []
    if fault.held:
        ends = [outcomes[i].finished_at if i in outcomes else None for i in fault.held]
        last = latest(ends)
        backs.append(None if last is None else _seconds(last, fault.at))
    if fault.producers:
        backs.append(_seconds(fault.service_back, fault.at))
    if not backs:
        backs.append(_seconds(next((t for t in finishes if t > fault.at), None), fault.at))
    return latest(backs)


def _lost(run: Run, outcomes: dict[uuid.UUID, JobOutcome]) -> tuple[int, str]:
    found: Counter[str] = Counter()
    for job_id, state in run.expected.items():
        outcome = outcomes.get(job_id)
        if outcome is None:
            found["not stored"] += 1
        elif outcome.state != state:
            why = ", ".join(filter(None, [outcome.last_error, "never ran" if outcome.runs == 0 else ""]))
            found[outcome.state + (f" ({why})" if why else "")] += 1
    text = ", ".join(f"{n} {what}" for what, n in found.most_common())
    return sum(found.values()), text


def _duplicates(run: Run, outcomes: list[JobOutcome]) -> tuple[int, int, int]:
    """(duplicate runs, of which allowed, logical jobs stored more than once)."""
    groups: dict[str, list[JobOutcome]] = defaultdict(list)
    for outcome in outcomes:
        groups[outcome.key or str(outcome.id)].append(outcome)
    duplicates = allowed = twice = 0
    for jobs in groups.values():
        runs = sum(o.runs for o in jobs)
        owed = min(max(o.max_attempts for o in jobs), 1 + sum(o.failing_runs for o in jobs))
        extra = max(runs - owed, 0)
        ids = {o.id for o in jobs}
        hits = sum(1 for fault in run.faults if fault.held & ids)
        duplicates += extra
        allowed += min(extra, hits)
        twice += len(jobs) > 1
    return duplicates, allowed, twice


def _wrong(outcome: JobOutcome) -> str | None:
    if outcome.state == "completed":
        if outcome.result_outcome != "completed":
            return "completed without a completed result"
        if outcome.runs == 0:
            return "completed without a run"
        if outcome.result_attempt is not None and outcome.result_attempt != outcome.attempts:
            return "result of a stale attempt"
    elif outcome.state == "dead_letter" and outcome.result_outcome == "completed":
        return "dead letter with a completed result"
    return None


def _poison(outcomes: list[JobOutcome]) -> list[str]:
    """What became of the jobs of other types than the recording ones, type by type."""
    kinds: dict[str, list[JobOutcome]] = defaultdict(list)
    for outcome in outcomes:
        if outcome.job_type not in ("record", "record_sync"):
            kinds[outcome.job_type].append(outcome)
    lines = []
    for kind, jobs in sorted(kinds.items()):
        ends = Counter(o.state + (f" ({o.last_error})" if o.last_error else "") for o in jobs)
        lines.append(
            f"{kind}: "
            + ", ".join(f"{n} {end}" for end, n in ends.most_common())
            + f" after {sum(o.runs for o in jobs)} runs"
        )
    return lines


def judge(run: Run, outcomes: list[JobOutcome]) -> Row:
    by_id = {o.id: o for o in outcomes}
    lost, lost_text = _lost(run, by_id)
    duplicates, allowed, twice = _duplicates(run, outcomes)
    wrong = Counter(reason for o in outcomes if (reason := _wrong(o)))
    finishes = sorted(o.finished_at for o in outcomes if o.finished_at is not None)
    recoveries = [_recovery(fault, by_id, finishes) for fault in run.faults]
    count = len(run.faults)
    notes = ([f"{count} fault{'s' if count > 1 else ''}"] if count else []) + _poison(outcomes) + run.notes
    failures = list(run.failures)
    if len(run.faults) < run.min_faults:
        failures.append(f"only {len(run.faults)} faults injected before the drain ended (more jobs needed)")
    stored = sorted({o.key for o in outcomes if o.key in run.refused_keys})
    if stored:
        failures.append(f"stored although refused: {', '.join(stored)}")
    known = [r for r in recoveries if r is not None]
    if len(known) > 1:
        notes.append(f"recovery {min(known):.1f}-{max(known):.1f} s")
    if lost:
        notes.append(f"lost: {lost_text}")
    if duplicates > allowed:
        notes.append(f"{duplicates - allowed} duplicate runs of jobs no fault held")
    if twice:
        notes.append(f"{twice} jobs stored twice for one idempotency key")
    if wrong:
        notes.append("wrong: " + ", ".join(f"{n} {why}" for why, n in wrong.most_common()))
    notes += failures
    if run.wedged:
        notes.append(f"wedged: {run.wedged}")
    failed = lost or duplicates > allowed or wrong or failures or run.wedged
    status = "WEDGED" if run.wedged else "FAIL" if failed else "ok"
    recovery = latest(recoveries)
    return Row(
        scenario=run.name,
        jobs=len(run.expected),
        lost=lost,
        duplicates=duplicates,
        allowed=allowed,
        wrong=sum(wrong.values()),
        recovery=recovery,
        status=status,
        notes="; ".join(notes),
        faults=[f.as_dict() for f in run.faults],
        logs=run.logs,
    )


def _recovery_text(row: Row) -> str:
    if row.recovery is not None:
        return f"{row.recovery:.1f} s"
    return "never" if row.faults else "-"


def render(rows: list[Row], header: str = "") -> str:
    """The campaign's table, one line per scenario."""
    columns = ("scenario", "jobs", "lost", "duplicates (allowed)", "wrong", "recovery", "status", "notes")
    lines = [
        (
            r.scenario,
            f"{r.jobs:,}",
            str(r.lost),
            f"{r.duplicates} ({r.allowed})",
            str(r.wrong),
            _recovery_text(r),
            r.status,
            r.notes,
        )
        for r in rows
    ]
    widths = [max(len(columns[i]), *(len(line[i]) for line in lines)) for i in range(len(columns) - 1)]

    def fmt(cells) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths)) + "  " + cells[-1]

    out = [header] if header else []
    out += [fmt(columns), fmt(["-" * w for w in widths] + ["-----"])]
    out += [fmt(line) for line in lines]
    return "\n".join(out)


def exit_status(rows: list[Row]) -> int:
    return 0 if all(row.passed for row in rows) else 1
