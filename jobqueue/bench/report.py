"""The bench's output: every figure of issue 10 beside the raw baseline measured in the same run,
their ratio, the issue's target and whether the median meets it (and by how much it misses).

Each run gives per figure a pair (jobqueue, raw); a ratio is taken within its run (the machine is
noisy, 10–40 % between runs, so a ratio only means something against the baseline measured
beside it). Over ``--runs`` K the table shows medians, the range in brackets, and judges the
median. ``--json`` prints the same, and every run's details, for machines.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Target:
    text: str
    check: Callable[[float | None, float | None], tuple[bool, str] | None]  # (jobqueue, ratio) → (met, how far)


def ratio_at_least(floor: float) -> Target:
    def check(_value, ratio):
        if ratio is None:
            return None
        return (True, "") if ratio >= floor else (False, f"{ratio:.2f}x < {floor:g}x: {1 - ratio / floor:.0%} short")

    return Target(f">= {floor:g}x raw", check)


def ratio_at_most(ceiling: float) -> Target:
    def check(_value, ratio):
        if ratio is None:
            return None
        return (
            (True, "") if ratio <= ceiling else (False, f"{ratio:.2f}x > {ceiling:g}x: {ratio / ceiling - 1:.0%} over")
        )

    return Target(f"<= {ceiling:g}x raw", check)


def at_most(ceiling: float, unit: str) -> Target:
    def check(value, _ratio):
        if value is None:
            return None
        return (
            (True, "")
            if value <= ceiling
            else (False, f"{value:.2f} > {ceiling:g}{unit}: {value / ceiling - 1:.0%} over")
        )

    return Target(f"<= {ceiling:g}{unit}", check)


def at_least(floor: float, text: str) -> Target:
    def check(value, _ratio):
        if value is None:
            return None
        shown = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
        return (True, "") if value >= floor else (False, f"{shown} < {floor:,g}: {1 - value / floor:.0%} short")

    return Target(text, check)


YES = Target("yes", lambda value, _ratio: None if value is None else ((True, "") if value else (False, "no")))


@dataclass(frozen=True)
class Spec:
    key: str
    label: str
    unit: str  # how values print: "/s", "ms", "B", "n" (per job), "count", "MB", "x", "s", "yes"
    target: Target | None = None
    has_raw: bool = True
    ratio: bool = True  # False where jobqueue/raw means nothing (sizes near zero)


def _enqueue_one(path: str, label: str, p99_target: bool, rate_target: bool = True) -> list[Spec]:
    return [
        Spec(f"enqueue_one.{path}.jobs_per_s", f"{label}: jobs/s", "/s", ratio_at_least(0.8) if rate_target else None),
        Spec(f"enqueue_one.{path}.p50_ms", f"{label}: p50 ms", "ms"),
        Spec(f"enqueue_one.{path}.p99_ms", f"{label}: p99 ms", "ms", at_most(1.0, " ms") if p99_target else None),
    ]


DEFAULT_SECTIONS: list[tuple[str, list[Spec]]] = [
    (
        "enqueue one, each job its own commit (raw: single-row INSERT)",
        [
            *_enqueue_one("client", "AsyncClient.enqueue, 1 producer", True),
            *_enqueue_one("sql", "SELECT jobqueue.enqueue(), 1 producer", True),
            *_enqueue_one("client_x8", "AsyncClient.enqueue, 8 producers", False),
        ],
    ),
    (
        "bulk, --chunk jobs per call (raw: COPY)",
        [
            Spec("bulk.client.jobs_per_s", "AsyncClient.enqueue_many: jobs/s", "/s", ratio_at_least(0.6)),
            Spec("bulk.sql.jobs_per_s", "SQL jobqueue.enqueue_many: jobs/s", "/s", ratio_at_least(0.6)),
            Spec("bulk.rest.jobs_per_s", "REST POST /jobs/batch: jobs/s", "/s", ratio_at_least(0.6)),
        ],
    ),
    (
        "drain: --processes x --concurrency, --jobs no-op jobs",
        [
            Spec("drain.jobs_per_s", "drain: jobs/s (first claim to last ack)", "/s", ratio_at_least(0.75)),
            Spec("drain.wal_bytes_per_job", "drain: WAL bytes per job", "B", ratio_at_most(1.3)),
            Spec("drain.heap_versions_per_job", "drain: heap row versions per job", "n"),
            Spec("drain.btree_insertions_per_job", "drain: index entries inserted per job", "n"),
            Spec("load.wal_bytes_per_job", "bulk load: WAL bytes per job", "B"),
            Spec("load.heap_versions_per_job", "bulk load: heap row versions per job", "n"),
            Spec("load.btree_insertions_per_job", "bulk load: index entries inserted per job", "n"),
            Spec("drain.exactly_once", "every job ran exactly once", "yes", YES),
        ],
    ),
    (
        "pick-up on an idle worker, from the enqueue's commit (the call's return) to the claim",
        [
            Spec("pickup.p50_ms", "pick-up p50 ms", "ms", at_most(1.2, " ms")),
            Spec("pickup.p99_ms", "pick-up p99 ms", "ms", at_most(3.0, " ms")),
            Spec("pickup.from_call_p50_ms", "pick-up p50 ms, from the enqueue call", "ms"),
            Spec("pickup.from_call_p99_ms", "pick-up p99 ms, from the enqueue call", "ms"),
        ],
    ),
    (
        "REST POST /jobs, one API process (no raw baseline)",
        [
            Spec("rest.paced_p99_ms", "paced 1,000/s: p99 ms", "ms", at_most(5.0, " ms"), has_raw=False),
            Spec(
                "rest.closed_req_per_s",
                "closed loop: req/s",
                "/s",
                at_least(8925, ">= 8,925/s (1.5x 5,950)"),
                has_raw=False,
            ),
        ],
    ),
    (
        "a 1,000,000-job backlog, with and without a held snapshot",
        [Spec("backlog.last_over_first", "flat drain, table size after pruning", "x")],
    ),
]

BACKLOG_SECTIONS: list[tuple[str, list[Spec]]] = [
    (
        "backlog: --backlog jobs, drained by --processes x --concurrency",
        [
            Spec("backlog.load_jobs_per_s", "enqueue_many / COPY: jobs/s", "/s", ratio_at_least(0.6)),
            Spec("backlog.drain_jobs_per_s", "drain: jobs/s", "/s", ratio_at_least(0.75)),
            Spec("backlog.first_tenth_per_s", "claims/s over the first tenth", "/s"),
            Spec("backlog.last_tenth_per_s", "claims/s over the last tenth", "/s"),
            Spec("backlog.last_over_first", "last tenth / first tenth", "x", at_least(0.8, ">= 0.8")),
            Spec("backlog.autovacuum_runs", "autovacuum runs on the table during the drain", "count"),
            Spec("backlog.heap_mb.start", "table heap MB: at the start", "MB", ratio=False),
            Spec("backlog.heap_mb.loaded", "table heap MB: loaded", "MB"),
            Spec("backlog.heap_mb.drained", "table heap MB: right after the drain", "MB"),
            Spec("backlog.heap_mb.pruned", "table heap MB: pruned + VACUUM", "MB", ratio=False),
            Spec("backlog.heap_mb.maintained", "table heap MB: + REINDEX", "MB", ratio=False),
            Spec("backlog.index_mb.start", "indexes MB: at the start", "MB", ratio=False),
            Spec("backlog.index_mb.loaded", "indexes MB: loaded", "MB"),
            Spec("backlog.index_mb.drained", "indexes MB: right after the drain", "MB"),
            Spec("backlog.index_mb.pruned", "indexes MB: pruned + VACUUM", "MB"),
            Spec("backlog.index_mb.maintained", "indexes MB: + REINDEX of the bloated ones", "MB"),
            Spec(
                "backlog.growth_left",
                "table + indexes: share of the backlog's growth left after prune + VACUUM + REINDEX",
                "x",
                at_most(0.1, ""),
            ),
            Spec("backlog.prune_seconds", "prune + VACUUM seconds", "s"),
            Spec("backlog.reindex_seconds", "REINDEX seconds (one index after another)", "s", ratio=False),  # raw: none
            Spec("backlog.rebuilt", "indexes rebuilt", "count"),
            Spec("backlog.exactly_once", "every job ran exactly once", "yes", YES),
        ],
    ),
    ("enqueue, bulk, drain, WAL and pick-up", [Spec("enqueue_one.client.jobs_per_s", "the other figures", "/s")]),
]

NOT_MEASURED = {
    "rest.": "add --rest (or run `jobqueue bench api`)",
    "backlog.": "run `jobqueue bench --backlog 1000000` (and with --hold-xmin)",
    "enqueue_one.": "run `jobqueue bench` without --backlog",
}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    return None if isinstance(value, float) and math.isnan(value) else float(value)


def _stats(values: list[Any]) -> dict[str, Any] | None:
    if not values:
        return None
    if all(isinstance(v, bool) for v in values):
        return {"all": all(values), "runs": len(values), "true": sum(values)}
    numbers = [n for n in (_number(v) for v in values) if n is not None]
    if not numbers:
        return None
    return {"median": statistics.median(numbers), "min": min(numbers), "max": max(numbers), "runs": len(numbers)}


def summarize(runs: list[dict[str, tuple[Any, Any]]], sections: list[tuple[str, list[Spec]]]) -> dict[str, Any]:
    """Per figure: medians and ranges of jobqueue, raw and the in-run ratio, and the verdict."""
    summary: dict[str, Any] = {}
    for _title, specs in sections:
        for spec in specs:
            pairs = [run[spec.key] for run in runs if spec.key in run]
            jq = _stats([pair[0] for pair in pairs if pair[0] is not None])
            raw = _stats([pair[1] for pair in pairs if pair[1] is not None]) if spec.has_raw else None
            ratios = [
                x / y
                for a, b in pairs
                if spec.has_raw
                and spec.ratio
                and spec.unit != "yes"
                and (x := _number(a)) is not None
                and (y := _number(b))
            ]
            ratio = _stats(ratios)
            value = None if jq is None else jq.get("median", jq.get("all"))
            verdict = spec.target.check(value, None if ratio is None else ratio["median"]) if spec.target else None
            summary[spec.key] = {
                "label": spec.label,
                "jobqueue": jq,
                "raw": raw,
                "ratio": ratio,
                "target": spec.target.text if spec.target else None,
                "met": None if verdict is None else verdict[0],
                "miss": None if verdict is None else verdict[1],
            }
    return summary


def _format(value: float, unit: str) -> str:
    if unit == "/s":
        return f"{value:,.0f}"
    if unit in ("ms", "x"):
        return f"{value:.2f}"
    if unit == "B":
        return f"{value:,.0f}"
    if unit == "MB":
        return f"{value:,.1f}"
    if unit == "s":
        return f"{value:.1f}"
    if unit == "count":
        return f"{value:g}"
    return f"{value:.2f}"


def _cell(stats: dict[str, Any] | None, unit: str) -> str:
    if stats is None:
        return "-"
    if "all" in stats:
        return "yes" if stats["all"] else f"NO ({stats['runs'] - stats['true']} of {stats['runs']} runs)"
    text = _format(stats["median"], unit)
    if stats["runs"] > 1 and stats["min"] != stats["max"]:
        text += f" ({_format(stats['min'], unit)}-{_format(stats['max'], unit)})"
    return text


def _ratio_cell(stats: dict[str, Any] | None) -> str:
    if stats is None:
        return ""
    text = f"{stats['median']:.2f}x"
    if stats["runs"] > 1 and stats["min"] != stats["max"]:
        text += f" ({stats['min']:.2f}-{stats['max']:.2f})"
    return text


def table(summary: dict[str, Any], sections: list[tuple[str, list[Spec]]], labels: dict[str, str]) -> str:
    """One plain-text table; ``labels`` fills the section titles' option names with their values."""
    header = ("figure", "jobqueue", "raw", "jobqueue/raw", "target (issue 10)", "met?")
    rows: list[tuple[str, ...] | str] = []
    for title, specs in sections:
        for option, value in labels.items():
            title = title.replace(option, value)
        rows.append(title)
        for spec in specs:
            entry = summary[spec.key]
            if entry["jobqueue"] is None:
                missing = next(
                    (text for prefix, text in NOT_MEASURED.items() if spec.key.startswith(prefix)),
                    "not measured (see the log)",
                )
                rows.append(f"{spec.label}\0not measured: {missing}")
                continue
            met = "" if entry["met"] is None else ("yes" if entry["met"] else f"NO: {entry['miss']}")
            rows.append(
                (
                    spec.label,
                    _cell(entry["jobqueue"], spec.unit),
                    _cell(entry["raw"], spec.unit) if spec.has_raw else "",
                    _ratio_cell(entry["ratio"]),
                    entry["target"] or "",
                    met,
                )
            )
    cells = [header] + [row for row in rows if isinstance(row, tuple)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    widths[0] = max([widths[0]] + [len(row.partition("\0")[0]) for row in rows if isinstance(row, str) and "\0" in row])

    def line(row: tuple[str, ...]) -> str:
        return " | ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()

    out = [line(header), "-+-".join("-" * width for width in widths)]
    for row in rows:
        if isinstance(row, tuple):
            out.append(line(row))
        elif "\0" in row:  # a figure this run did not measure: say how to get it
            label, _, missing = row.partition("\0")
            out.append(f"{label.ljust(widths[0])} | {missing}")
        else:
            out.append(f"-- {row}")
    return "\n".join(out)


def header(document: dict[str, Any]) -> str:
    """What was measured, where, and how loaded the machine was."""
    args, server, machine = document["args"], document["server"], document["machine"]
    if args["backlog"]:
        what = (
            f"backlog of {args['backlog']:,} jobs, {args['processes']} processes x {args['concurrency']}"
            f"{', snapshot held during each drain' if args['hold_xmin'] else ''}"
        )
    else:
        what = (
            f"drain {args['jobs']:,} jobs with {args['processes']} processes x {args['concurrency']}"
            f"{' (snapshot held)' if args['hold_xmin'] else ''}; enqueue one {args['single']:,} per path; "
            f"bulk {args['jobs']:,} per path, {args['chunk']:,} per call; pick-up {args['pickup_samples']} samples"
        )
    load = document["load_average"]
    lines = [
        f"jobqueue bench: {len(document['runs'])} run(s) of {what}",
        f"database: {server['where']}, PostgreSQL {server['version']}, fsync={server['fsync']}, "
        f"synchronous_commit={server['synchronous_commit']}, full_page_writes={server['full_page_writes']}, "
        f"shared_buffers={server['shared_buffers']}",
        f"machine: {machine['cores']} cores ({machine['cpu']}), {machine['memory']}; load average "
        f"{' '.join(f'{v:.2f}' for v in load['before'])} before, {' '.join(f'{v:.2f}' for v in load['after'])} after",
        f"index entries: {document['wal_records']}",
        "raw: a minimal hand-written queue in schema jobqueue_bench_raw, same cluster, same run (jobqueue.bench.raw); "
        "values are medians (range) over the runs, ratios taken within each run",
    ]
    return "\n".join(lines + [f"note: {note}" for note in document["notes"]])


def render(document: dict[str, Any]) -> str:
    """The header and the table of a bench's document (what ``--json`` prints)."""
    args = document["args"]
    sections = BACKLOG_SECTIONS if args["backlog"] else DEFAULT_SECTIONS
    labels = {
        "--jobs": f"{args['jobs']:,}",
        "--chunk": f"{args['chunk']:,}",
        "--processes": str(args["processes"]),
        "--concurrency": str(args["concurrency"]),
        "--backlog": f"{args['backlog'] or 0:,}",
    }
    return header(document) + "\n\n" + table(document["summary"], sections, labels)


def to_json(document: dict[str, Any]) -> str:
    def default(value: Any) -> Any:
        return str(value)

    def clean(value: Any) -> Any:  # NaN is not JSON
        if isinstance(value, float) and math.isnan(value):
            return None
        if isinstance(value, dict):
            return {str(k): clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        return value

    return json.dumps(clean(document), indent=2, default=default)
