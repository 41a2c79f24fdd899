"""The campaign's scenarios: each seeds or produces jobs, runs workers on the recording app, injects
its faults while jobs are still pending, waits for the drain and leaves the judging to `report`.

| scenario | fault |
|---|---|
| sigkill | SIGKILL a random worker process every 2-3 s; the killed one is started again |
| sigstop | SIGSTOP a worker for two leases (its jobs go to others), then SIGCONT: its late acks must change nothing |
| pg-crash | PostgreSQL ``restart -m immediate`` (a crash: recovery from WAL), 3 times |
| pg-restart | PostgreSQL ``restart -m fast``, 3 times |
| pg-terminate | ``pg_terminate_backend`` of every session of the database, 5 times |
| producers | Python and REST producers submit while PostgreSQL is down for 2 s (stopped ``-m immediate``) |
| api-kill | SIGKILL the ``jobqueue api`` process 3 times while REST producers submit |
| poison | handlers that never return (async), block their thread forever (sync), return a result too large for |
|        | jsonb or not JSON, and a payload holding NUL, among normal jobs |

Jobs of the drain scenarios sleep so that an undisturbed drain would take a set time (the
scenario's ``drain`` seconds, at the configured workers x concurrency), long enough for several
faults. Database-fault scenarios give jobs ``max_attempts=1``: a fault must not cost an attempt
of a job that never ran (a lost claim reply), or the job is dead-lettered and counted lost.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Awaitable, Callable

from jobqueue.client import AsyncClient
from jobqueue.model.errors import ValidationError
from tests.harness.devdb import free_port
from tests.harness.faults import store as faults_store
from tests.harness.faults.app import HUGE_RESULT_CHARS, JSONB_STRING_MAX, POISON_ATTEMPTS
from tests.harness.faults.cluster import FaultCluster, Monitor, now
from tests.harness.faults.fleet import STOP_MARGIN, ApiProcess, WorkerFleet
from tests.harness.faults.producers import PythonSubmitter, RestSubmitter, Tally, produce, seed
from tests.harness.faults.report import Fault, Row, Run, judge, latest


@dataclass(frozen=True)
class Config:
    jobs: int = 10_000
    workers: int = 3
    concurrency: int = 10
    lease: float = 5.0
    sweep_interval: float = 1.0
    leader_ttl: float = 3.0
    shutdown_grace: float = 5.0
    drain_scale: float = 1.0  # multiplies every scenario's undisturbed drain time
    timeout: float | None = None  # per scenario; default 120 s + 30 ms per job
    huge_result_chars: int = HUGE_RESULT_CHARS  # the poison "huge" result; tests use a storable one
    logdir: Path = Path(".run/faults")

    def worker_env(self) -> dict[str, str]:
        return {
            "JOBQUEUE_CONCURRENCY": str(self.concurrency),
            "JOBQUEUE_LEASE_SECONDS": str(self.lease),
            "JOBQUEUE_SWEEP_INTERVAL": str(self.sweep_interval),
            "JOBQUEUE_LEADER_TTL": str(self.leader_ttl),
            "JOBQUEUE_POLL_INTERVAL": "1",
            "JOBQUEUE_SHUTDOWN_GRACE": str(self.shutdown_grace),
            "JOBQUEUE_REINDEX_INTERVAL": "0",
            "JOBQUEUE_FAULTS_HUGE_CHARS": str(self.huge_result_chars),
        }

    @property
    def stall_seconds(self) -> float:
        """No job finishing for this long, with jobs still live, is a wedge (several leases,
        a leader's TTL and sweeps: everything recovery may legitimately wait for)."""
        return max(30.0, 4 * self.lease + self.leader_ttl + self.sweep_interval)

    @property
    def scenario_timeout(self) -> float:
        return self.timeout or 120.0 + 0.03 * self.jobs


#: How long a started fleet may take to register every worker (imports on a loaded 2-core box).
WORKERS_READY_TIMEOUT = 60.0


class Stage:
    """One scenario's world: its fresh database, worker fleet, harness connection, and its `Run`."""

    def __init__(self, name: str, cluster: FaultCluster, config: Config) -> None:
        self.cluster = cluster
        self.config = config
        self.run = Run(name)
        self.dsn = cluster.fresh_database(name)
        self.logdir = config.logdir / name
        self.logdir.mkdir(parents=True, exist_ok=True)
        for old in self.logdir.glob("*.log"):
            old.unlink()
        self.run.logs = str(self.logdir)
        self.monitor = Monitor(self.dsn)
        self.fleet = WorkerFleet(self.dsn, config.workers, config.worker_env(), self.logdir, config.shutdown_grace)
        self.api: ApiProcess | None = None
        self._keeper: asyncio.Task | None = None

    # --- set-up -------------------------------------------------------------------------------

    def client(self, **options) -> AsyncClient:
        return AsyncClient(self.dsn, **{"pool_size": 2, **options})

    def work_ms(self, drain_seconds: float) -> float:
        """Per-job sleep so that ``jobs`` drain in about ``drain_seconds`` when nothing goes wrong."""
        slots = self.config.workers * self.config.concurrency
        return min(max(1000 * drain_seconds * self.config.drain_scale * slots / self.config.jobs, 1.0), 500.0)

    async def seed(self, specs: list[dict], end_state: str = "completed") -> None:
        async with self.client() as client:
            ids = await seed(client, specs)
        self.run.expected.update((job_id, end_state) for job_id in ids)

    def record_jobs(
        self, count: int, ms: float, max_attempts: int, job_type: str = "record", prefix: str = "j"
    ) -> list[dict]:
        return [
            {"job_type": job_type, "payload": {"k": f"{prefix}{i}", "ms": ms}, "max_attempts": max_attempts}
            for i in range(count)
        ]

    async def start_workers(self) -> None:
        """Start the fleet and wait until every worker has registered: a fault must hit running
        workers, not processes still importing (a worker that cannot reach its database while it
        starts exits at once with one line, by design, and would count as a crash)."""
        self.fleet.start()
        self._keeper = asyncio.create_task(self.fleet.keep())
        deadline = time.monotonic() + WORKERS_READY_TIMEOUT
        while True:
            pids = [worker.pid for worker in self.fleet.running()]
            if len(pids) == len(self.fleet.workers) and len(
                await self.monitor.run(faults_store.registered_pids(pids))
            ) == len(pids):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the workers did not register within {WORKERS_READY_TIMEOUT:.0f} s (logs: {self.logdir})"
                )
            await asyncio.sleep(0.1)

    async def start_api(self) -> ApiProcess:
        self.api = ApiProcess(self.dsn, free_port(), self.logdir)
        await self.api.start()
        return self.api

    # --- reading the database -------------------------------------------------------------------

    async def progress(self) -> tuple[int, int, int]:
        return await self.monitor.run(faults_store.progress())

    async def pending(self) -> int:
        return (await self.progress())[2]

    async def held_by(self, pid: int) -> set[uuid.UUID]:
        return set(await self.monitor.run(faults_store.held_by_pid(pid)))

    async def processing(self) -> set[uuid.UUID]:
        return set(await self.monitor.run(faults_store.processing()))

    async def under_way(self, fraction: float = 0.05) -> None:
        """Wait until a share of the jobs finished: faults hit a drain in full swing."""
        while True:
            done, live, _ = await self.progress()
            if done >= fraction * (done + live) or live == 0:
                return
            await asyncio.sleep(0.1)

    async def drained(self) -> None:
        """Wait until no job is live; a drain where no job finished for `Config.stall_seconds` is
        declared wedged (the scenario's timeout covers a drain that crawls)."""
        stall = self.config.stall_seconds
        last_done, since = -1, time.monotonic()
        while True:
            done, live, _ = await self.progress()
            if live == 0:
                return
            if done != last_done:
                last_done, since = done, time.monotonic()
            elif time.monotonic() - since > stall:
                self.run.wedged = f"no job finished for {stall:.0f} s with {live} still live"
                return
            await asyncio.sleep(0.25)

    # --- the end ------------------------------------------------------------------------------

    async def finish(self) -> Row:
        """Stop everything gracefully (what does not stop is reported), then judge the database."""
        if self._keeper is not None:
            self._keeper.cancel()
        await asyncio.to_thread(self.cluster.ensure_running)
        ignored = await asyncio.to_thread(self.fleet.stop)
        if ignored:
            self.run.failures.append(
                f"SIGTERM ignored by {', '.join(ignored)} "
                f"(still running {self.config.shutdown_grace + STOP_MARGIN:.0f} s later)"
            )
        if self.api is not None:
            await asyncio.to_thread(self.api.stop)
            if self.api.ignored_sigterm:
                self.run.failures.append("SIGTERM ignored by the API process")
        for name, pid, status in self.fleet.own_exits:
            (self.run.failures if status != 0 else self.run.notes).append(
                f"{name} (pid {pid}) exited by itself with status {status} (started again)"
            )
        faults = [fault.as_dict(held_ids=True) for fault in self.run.faults]
        (self.logdir / "faults.json").write_text(json.dumps(faults, indent=1))
        outcomes = await self.monitor.run(faults_store.job_outcomes())
        await self.monitor.close()
        return judge(self.run, outcomes)


# --- the scenarios ------------------------------------------------------------------------------


async def sigkill(stage: Stage) -> None:
    stage.run.min_faults = 1
    await stage.seed(stage.record_jobs(stage.config.jobs, stage.work_ms(20), max_attempts=5))
    await stage.start_workers()
    await stage.under_way()
    rng = random.Random()
    while await stage.pending():
        await asyncio.sleep(rng.uniform(2.0, 3.0))
        victims = stage.fleet.running()
        if not victims:
            continue
        victim = rng.choice(victims)
        at = now()
        pid = victim.kill()
        victim.start()  # restart killed ones, as an orchestrator would
        stage.run.faults.append(Fault(f"SIGKILL {victim.name} (pid {pid})", at, await stage.held_by(pid)))
    await stage.drained()


async def sigstop(stage: Stage) -> None:
    stage.run.min_faults = 1
    pause = 2 * stage.config.lease + stage.config.sweep_interval + 1
    await stage.seed(stage.record_jobs(stage.config.jobs, stage.work_ms(24), max_attempts=5))
    await stage.start_workers()
    await stage.under_way()
    rng = random.Random()
    while await stage.pending():
        victim = rng.choice(stage.fleet.running())
        at = now()
        victim.signal(signal.SIGSTOP)
        fault = Fault(f"SIGSTOP {victim.name} for {pause:.0f} s", at, await stage.held_by(victim.pid))
        stage.run.faults.append(fault)
        await asyncio.sleep(1.0)
        # a claim it sent just before it stopped may commit only now: those jobs are its too
        fault.held |= await stage.held_by(victim.pid)
        await asyncio.sleep(pause - 1.0)
        victim.signal(signal.SIGCONT)  # its handlers finish and its acks arrive late
        await asyncio.sleep(2.0)
    await stage.drained()


async def _database_faults(stage: Stage, count: int, spacing: float, inject: Callable[[], Awaitable[str]]) -> None:
    """A drain (max_attempts=1) with ``count`` database faults ``spacing`` seconds apart; each fault
    may hit every job in processing just before it or just after it."""
    stage.run.min_faults = 1
    await stage.seed(stage.record_jobs(stage.config.jobs, stage.work_ms(15), max_attempts=1))
    await stage.start_workers()
    await stage.under_way()
    for _ in range(count):
        if not await stage.pending():
            break
        before = await stage.processing()
        at = now()
        what = await inject()
        stage.run.faults.append(Fault(what, at, before | await stage.processing()))
        await asyncio.sleep(spacing)
    await stage.drained()


def _restart(stage: Stage, mode: str) -> Callable[[], Awaitable[str]]:
    async def inject() -> str:
        took = await asyncio.to_thread(stage.cluster.restart, mode)
        return f"restart -m {mode} ({took:.1f} s)"

    return inject


async def pg_crash(stage: Stage) -> None:
    await _database_faults(stage, 3, 4.0, _restart(stage, "immediate"))


async def pg_restart(stage: Stage) -> None:
    await _database_faults(stage, 3, 4.0, _restart(stage, "fast"))


async def pg_terminate(stage: Stage) -> None:
    async def inject() -> str:
        return f"pg_terminate_backend x{await stage.monitor.run(faults_store.terminate_backends())}"

    await _database_faults(stage, 5, 2.0, inject)


#: Producer tasks per path (Python, REST) in the producer scenarios.
PRODUCERS = 4
PRODUCED_MS = 2.0
OUTAGE_SECONDS = 2.0


async def _accepted(tallies: list[Tally], count: int, producing: asyncio.Future) -> None:
    while sum(len(t.accepted) for t in tallies) < count and not producing.done():
        await asyncio.sleep(0.02)


def mark_service_back(fault: Fault, tallies: list[Tally], since: datetime | None = None) -> None:
    """When every path had a submission accepted after ``since`` (default: the fault)."""
    fault.producers = True
    backs = [t.first_accept_after(since or fault.at) for t in tallies]
    fault.service_back = latest(backs)


def record_producers(stage: Stage, tallies: list[Tally]) -> None:
    for tally in tallies:
        stage.run.expected.update((job_id, "completed") for job_id in tally.accepted.values())
        stage.run.notes.append(tally.summary())
        if tally.unclean:
            stage.run.failures.append(f"{sum(tally.unclean.values())} unclean {tally.path} errors")


def _shares(keys: list[str], parts: int) -> list[list[str]]:
    return [keys[i::parts] for i in range(parts)]


async def producers(stage: Stage) -> None:
    stage.run.min_faults = 1
    api = await stage.start_api()
    await stage.start_workers()
    keys = [f"p{i}" for i in range(stage.config.jobs)]
    python, rest = Tally("python"), Tally("rest")
    async with stage.client(
        producer_id="faults-python", pool_size=PRODUCERS, pool_timeout=2.0, connect_timeout=2
    ) as client:
        api_key, _ = await client.create_api_key("faults-rest")
        tasks = [
            produce(PythonSubmitter(client, PRODUCED_MS, 1), share, python) for share in _shares(keys[0::2], PRODUCERS)
        ]
        tasks += [
            produce(RestSubmitter(api.url, api_key, PRODUCED_MS, 1, api_may_be_down=False), share, rest)
            for share in _shares(keys[1::2], PRODUCERS)
        ]
        producing = asyncio.ensure_future(asyncio.gather(*tasks))
        await _accepted([python, rest], len(keys) // 3, producing)
        before = await stage.processing()
        fault = Fault(f"PostgreSQL stopped -m immediate for {OUTAGE_SECONDS:.0f} s", now())
        await asyncio.to_thread(stage.cluster.cluster.stop, "immediate")
        await asyncio.sleep(OUTAGE_SECONDS)
        await asyncio.to_thread(stage.cluster.cluster.start)
        fault.held = before | await stage.processing()
        stage.run.faults.append(fault)
        await producing
    mark_service_back(fault, [python, rest])
    record_producers(stage, [python, rest])
    await stage.drained()


async def api_kill(stage: Stage) -> None:
    stage.run.min_faults = 1
    api = await stage.start_api()
    await stage.start_workers()
    keys = [f"a{i}" for i in range(stage.config.jobs)]
    rest = Tally("rest")
    async with stage.client() as client:
        api_key, _ = await client.create_api_key("faults-rest")
    tasks = [
        produce(RestSubmitter(api.url, api_key, PRODUCED_MS, 3, api_may_be_down=True), share, rest)
        for share in _shares(keys, 2 * PRODUCERS)
    ]
    producing = asyncio.ensure_future(asyncio.gather(*tasks))
    restarted = []
    for share in (0.2, 0.45, 0.7):
        await _accepted([rest], int(share * len(keys)), producing)
        if producing.done():
            break
        at = now()
        stage.run.faults.append(Fault(f"SIGKILL api (pid {api.kill()})", at))
        await api.start()
        restarted.append(now())  # answers read before this were sent by the killed process
    await producing
    for fault, since in zip(stage.run.faults, restarted):
        mark_service_back(fault, [rest], since)
    record_producers(stage, [rest])
    await stage.drained()


async def poison(stage: Stage) -> None:
    config = stage.config
    ms = stage.work_ms(8)
    blocks = config.workers * config.concurrency  # their runs can take every handler thread twice over
    # max_attempts given, as the workers publish their tasks' defaults only once they start
    poisoned = [
        {"job_type": "hang", "payload": {"k": f"hang-{i}"}, "max_attempts": POISON_ATTEMPTS}
        for i in range(config.workers)
    ]
    poisoned += [
        {"job_type": "block", "payload": {"k": f"block-{i}"}, "max_attempts": POISON_ATTEMPTS} for i in range(blocks)
    ]
    await stage.seed(poisoned + [{"job_type": "not_json", "payload": {"k": "not_json"}}], end_state="dead_letter")
    # a result jsonb cannot hold must be failed (once); a merely very large one stored
    await stage.seed(
        [{"job_type": "huge", "payload": {"k": "huge"}}],
        end_state="dead_letter" if config.huge_result_chars > JSONB_STRING_MAX else "completed",
    )
    half = config.jobs // 2
    await stage.seed(stage.record_jobs(half, ms, 3) + stage.record_jobs(config.jobs - half, ms, 3, "record_sync", "s"))
    stage.run.refused_keys.add("nul")
    async with stage.client() as client:
        try:
            await client.enqueue("record", {"k": "nul", "text": "a\x00b"})
            stage.run.failures.append("a payload holding NUL was accepted")
        except ValidationError as exc:
            stage.run.notes.append(f"NUL payload refused ({exc.field})")
    await stage.start_workers()
    await stage.drained()


@dataclass(frozen=True)
class Scenario:
    name: str
    run: Callable[[Stage], Awaitable[None]]
    summary: str = field(default="")


SCENARIOS = {
    s.name: s
    for s in (
        Scenario("sigkill", sigkill, "SIGKILL a random worker every 2-3 s during a drain, restart it"),
        Scenario("sigstop", sigstop, "SIGSTOP a worker past its lease, then SIGCONT: late acks change nothing"),
        Scenario("pg-crash", pg_crash, "PostgreSQL restart -m immediate mid-drain, 3 times"),
        Scenario("pg-restart", pg_restart, "PostgreSQL restart -m fast mid-drain, 3 times"),
        Scenario("pg-terminate", pg_terminate, "pg_terminate_backend of every session, 5 times mid-drain"),
        Scenario("producers", producers, "Python and REST producers while PostgreSQL is down for 2 s"),
        Scenario("api-kill", api_kill, "SIGKILL the API process 3 times while REST producers submit"),
        Scenario("poison", poison, "hanging, blocking, too-large and non-JSON results, a NUL payload"),
    )
}


async def run_scenario(name: str, cluster: FaultCluster, config: Config) -> Row:
    """One scenario on a fresh database, bounded by ``config.scenario_timeout`` (then: wedged)."""
    stage = Stage(name, cluster, config)
    try:
        await asyncio.wait_for(SCENARIOS[name].run(stage), config.scenario_timeout)
    except asyncio.TimeoutError:
        stage.run.wedged = f"not over after {config.scenario_timeout:.0f} s"
    return await stage.finish()
