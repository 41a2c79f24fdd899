"""What every part of the benchmark shares: the run's context and its connections, percentiles,
child processes, and read-outs of what the database did between two moments — WAL bytes, row versions written per
table (``pg_stat_user_tables``), checkpoints, and WAL records by type (``pg_waldump``, when this
machine can read the server's ``pg_wal``: that is where B-tree insertions are counted, since no
statistics view counts index insertions)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psycopg

from jobqueue.bench import store
from jobqueue.client import AsyncClient
from jobqueue.config import Settings
from jobqueue.db import gateway as db

#: The schemas whose tables the bench counts: jobqueue's own and the raw baseline's.
SCHEMAS = ("jobqueue", store.RAW_SCHEMA)

#: How many per-second flushes an idle backend may still owe (PostgreSQL 15 reports an idle
#: backend's pending counters within 10 s; exiting backends report at once).
SETTLE_TIMEOUT = 12.0


# --- connections -------------------------------------------------------------------------------

#: ``application_name`` of every connection the bench opens itself or through jobqueue's client.
NAME = "jobqueue-bench"


def session(settings: Settings) -> db.Session:
    """The bench's own connections (``application_name`` jobqueue-bench): no statement, lock or
    idle-in-transaction timeout — a VACUUM or a delete of a million rows, a snapshot held through a
    whole drain. jobqueue's own code under measurement (`bench_client`, the workers, the API, the
    Pruner) keeps the timeouts ``settings`` gives it, as a user's would."""
    return db.Session.of(settings.db, NAME).unbounded().with_(idle_in_transaction_timeout=0)


def connect(settings: Settings, *, autocommit: bool = True) -> psycopg.Connection:
    return db.connect_sync(session(settings), autocommit=autocommit)


async def connect_async(settings: Settings) -> psycopg.AsyncConnection:
    return await db.connect(session(settings))


def bench_client(settings: Settings, pool_size: int = 1) -> AsyncClient:
    """jobqueue's client as a user opens it, named jobqueue-bench in ``pg_stat_activity``."""
    return AsyncClient(settings=settings, pool_size=pool_size, application_name=NAME)


@dataclass
class Bench:
    """One invocation's context: where, on which queue, with which options."""

    settings: Settings
    args: argparse.Namespace
    queue: str
    conn: psycopg.Connection  # autocommit: read-outs, VACUUM, clean-up
    server: dict[str, Any]  # where, version, version_num, fsync, synchronous_commit, full_page_writes, shared_buffers
    wal: "WalReader | None" = None
    notes: list[str] = field(default_factory=list)

    @property
    def dsn(self) -> str:
        return self.settings.db.dsn

    @property
    def server_major(self) -> int:
        return self.server["version_num"] // 10000

    def run(self, call: db.Call) -> Any:
        return db.run_sync(self.conn, call)


def open_bench(settings: Settings, args: argparse.Namespace, prefix: str) -> Bench:
    """A queue name of the bench's own (``<prefix>-<random>``), its connection (autocommit) and
    what the server is."""
    conn = connect(settings)
    try:
        version, version_num, fsync, synchronous_commit, full_page_writes, shared_buffers = db.run_sync(
            conn, store.server_settings()
        )
    except BaseException:
        conn.close()
        raise
    server = {
        "where": f"{conn.info.host}:{conn.info.port}/{conn.info.dbname}",
        "version": version,
        "version_num": version_num,
        "fsync": fsync,
        "synchronous_commit": synchronous_commit,
        "full_page_writes": full_page_writes,
        "shared_buffers": shared_buffers,
    }
    return Bench(settings=settings, args=args, queue=f"{prefix}-{uuid.uuid4().hex[:8]}", conn=conn, server=server)


def say(message: str) -> None:
    """Progress for the person watching (stderr: stdout carries only the table or the JSON)."""
    print(message, file=sys.stderr, flush=True)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def rate_and_latency(latencies_ms: list[float], jobs: int, elapsed: float) -> dict[str, float]:
    return {
        "jobs_per_s": jobs / elapsed if elapsed > 0 else float("nan"),
        "p50_ms": percentile(latencies_ms, 0.5),
        "p99_ms": percentile(latencies_ms, 0.99),
    }


def process_log(name: str) -> IO[str]:
    """A file for a child process's log: a pipe nobody reads would fill up and block the child."""
    handle = tempfile.NamedTemporaryFile("w", prefix=f"jobqueue-bench-{name}-", suffix=".log", delete=False)
    say(f"({name} log: {handle.name})")
    return handle


def stop_process(process: subprocess.Popen, timeout: float) -> None:
    """SIGTERM (a graceful stop), then SIGKILL if it has not exited within ``timeout`` seconds."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def lsn(text: str) -> int:
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) + int(low, 16)


def hold_snapshot(settings: Settings) -> psycopg.Connection:
    """A transaction that keeps its snapshot (and so the cluster's xmin horizon) until closed."""
    holder = connect(settings, autocommit=False)  # the snapshot lives until close()
    holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    db.run_sync(holder, store.hold_snapshot())
    return holder


# --- row versions ------------------------------------------------------------------------------

Counters = dict[str, dict[str, tuple[int, ...]]]  # schema → table → pg_stat_user_tables columns


def read_counters(bench: Bench) -> Counters:
    return {schema: bench.run(store.table_counters(schema)) for schema in SCHEMAS}


def settled_counters(bench: Bench) -> Counters:
    """The counters once every backend that wrote has reported them: a backend reports at exit
    (the bench stops the processes and closes the pools of each phase before reading) and this
    session reports its own on demand, so two equal reads in a row mean nothing is pending."""
    if bench.server_major >= 15:
        bench.run(store.stats_flush())
    previous = read_counters(bench)
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while time.monotonic() < deadline:
        time.sleep(0.3)
        current = read_counters(bench)
        if current == previous:
            return current
        previous = current
    return previous


def row_versions(before: Counters, after: Counters, schema: str) -> dict[str, Any]:
    """Heap row versions written in ``schema`` between two reads: inserted + updated (HOT ones
    among them), deleted, and autovacuum runs, in total and per table."""
    tables = {}
    for table, now in after.get(schema, {}).items():
        then = before.get(schema, {}).get(table, (0,) * len(now))
        delta = [a - b for a, b in zip(now, then)]
        if any(delta):
            tables[table] = {
                "inserted": delta[0],
                "updated": delta[1],
                "hot_updated": delta[2],
                "deleted": delta[3],
                "autovacuum_runs": delta[4],
                "autoanalyze_runs": delta[5],
            }
    total = {
        key: sum(table[key] for table in tables.values()) for key in ("inserted", "updated", "hot_updated", "deleted")
    }
    return {"written": total["inserted"] + total["updated"], **total, "tables": tables}


# --- WAL ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WalPoint:
    lsn: str
    checkpoints: int


def wal_point(bench: Bench) -> WalPoint:
    return WalPoint(bench.run(store.wal_position())[0], bench.run(store.checkpoints()))


def wal_bytes(start: WalPoint, end: WalPoint) -> int:
    return lsn(end.lsn) - lsn(start.lsn)


#: B-tree records that each insert one index entry (a split record carries the entry that
#: caused it; INSERT_UPPER/NEWROOT only link pages and DEDUP only merges entries).
BTREE_INSERTIONS = ("Btree/INSERT_LEAF", "Btree/INSERT_POST", "Btree/SPLIT_L", "Btree/SPLIT_R")

_RECORD_LINE = re.compile(r"^(\S+/\S+)\s+(\d+)\s+\(\s*[\d.]+\)\s+(\d+)\s+\(\s*[\d.]+\)\s+(\d+)\s+\(\s*[\d.]+\)\s+(\d+)")


class WalReader:
    """Counts WAL records by type between two positions with ``pg_waldump --stats=record``."""

    def __init__(self, binary: str, wal_dir: Path, timeline: int) -> None:
        self.binary, self.wal_dir, self.timeline = binary, wal_dir, timeline

    @classmethod
    def find(cls, bench: Bench) -> tuple["WalReader | None", str]:
        """The reader, or None and why not (a remote server, no privilege, no pg_waldump)."""
        try:
            data_dir, timeline = bench.run(store.data_directory())
        except psycopg.Error as exc:
            return None, f"the server's data directory is not readable here ({exc.diag.message_primary or exc})"
        wal_dir = Path(data_dir) / "pg_wal"
        if not (wal_dir.is_dir() and os.access(wal_dir, os.R_OK | os.X_OK)):
            return None, f"{wal_dir} is not readable from this machine and user"
        for candidate in (f"/usr/lib/postgresql/{bench.server_major}/bin/pg_waldump", shutil.which("pg_waldump")):
            if candidate and os.access(candidate, os.X_OK):
                version = subprocess.run([candidate, "--version"], capture_output=True, text=True).stdout
                if re.search(rf"\b{bench.server_major}\.", version):
                    return cls(candidate, wal_dir, timeline), ""
        return None, f"no pg_waldump of PostgreSQL {bench.server_major} on this machine"

    def records(self, bench: Bench, start: WalPoint, end: WalPoint) -> dict[str, tuple[int, int]] | None:
        """Record type → (records, bytes including full-page images); ``"FPI"`` → (0, FPI bytes).
        None when the WAL is gone (recycled by a checkpoint) or unreadable."""
        deadline = time.monotonic() + 3
        while lsn(bench.run(store.wal_position())[1]) < lsn(end.lsn) and time.monotonic() < deadline:
            time.sleep(0.05)  # the WAL writer flushes what no commit has flushed yet
        result = subprocess.run(
            [
                self.binary,
                "-p",
                str(self.wal_dir),
                "-t",
                str(self.timeline),
                "-s",
                start.lsn,
                "-e",
                end.lsn,
                "--stats=record",
            ],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0 and "Total" not in result.stdout:
            return None
        counts: dict[str, tuple[int, int]] = {}
        fpi = 0
        for line in result.stdout.splitlines():
            match = _RECORD_LINE.match(line)
            if match:
                kind, records, _, fpi_bytes, combined = match.groups()
                counts[kind] = (int(records), int(combined))
                fpi += int(fpi_bytes)
        counts["FPI"] = (0, fpi)
        return counts


def btree_insertions(records: dict[str, tuple[int, int]] | None) -> int | None:
    if records is None:
        return None
    return sum(records.get(kind, (0, 0))[0] for kind in BTREE_INSERTIONS)
