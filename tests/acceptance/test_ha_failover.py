"""jobqueue on a real HA stack (pg_auto_failover, the zero-loss topology: a monitor and three data
nodes, a commit waiting for one of two standbys): a drain by 2 `jobqueue-worker` processes of
3,000 seeded jobs topped up to hold ~10 s of work until the faults are over, with Python and REST producers enqueueing
(each retrying a failed call
with the same idempotency key) and a cron schedule firing every second, through a `pg_autoctl
perform failover`, a crash of the new primary (keeper and postmaster SIGKILLed: the monitor
promotes one of the others) and a crash of a standby (the primary goes on with the other: no
switch). Everything uses the multi-host DSN and has to find the primary by itself. (A SIGKILL of
the primary's postmaster alone is not among the faults: pg_auto_failover 2.0 can hang the failover
it may trigger, see `tests.harness.hastack.HaStack.replace` and docs/high-availability.md.)

It reuses the fault campaign's parts (tests.harness.faults: the recording app and its worker fleet, the
API process, the producers, the judge), so "lost", "duplicates (allowed)" and "wrong" mean what the
campaign's table says (docs/high-availability.md "Fault campaign"). The monitor must have promoted
a node exactly once per switch the faults ask for: a node declared dead that was not (a busy
machine) fails the run. The measured figures are printed and written to ``figures.json`` beside
the worker and API logs in test-artifacts/ha-failover/, with the monitor's events
(``monitor-events.json``), the nodes' states (``node-states.json``), the pg_autoctl logs and each
node's server log (kept outside its data directory, which pg_rewind replaces); a failed run's are
also copied to ``test-artifacts/ha-failover-failed/<time>/``, which later runs do not overwrite.
docs/high-availability.md quotes the figures.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import shutil
import tempfile
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import pytest

from jobqueue.db import gateway as db
from jobqueue.model.errors import DatabaseUnavailable
from tests.harness import hastack
from tests.harness.faults import store as faults_store
from tests.harness.faults.cluster import now, prepare_database
from tests.harness.faults.producers import PythonSubmitter, RestSubmitter, Tally, produce
from tests.harness.faults.report import Fault
from tests.harness.faults.scenarios import Config, Stage, mark_service_back, record_producers

pytestmark = pytest.mark.slow

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ha-failover"
FAILED_ARTIFACTS = ARTIFACTS.parent / "ha-failover-failed"

WORKERS, CONCURRENCY = 2, 10
LEASE = 30.0  # longer than a crash failover's outage: a job is run twice only if its worker died
LEADER_TTL = 3.0
SEEDED = 3_000
#: While the faults run the backlog is topped up to hold this many seconds of work at the rate jobs
#: finish (at least `MIN_BACKLOG` jobs): the drain outlasts the faults however busy the machine is,
#: and what is left to drain after them takes about as long (a fixed backlog of 10,000 jobs took
#: minutes at the 50-150 jobs/s of a machine loaded to 25, and the test timed out).
HOLD = 10.0
MIN_BACKLOG = 1_000
WINDOW = 6.0  # seconds of drain measured before the first fault and after the last recovery
PRODUCERS = 2  # per path (Python, REST)
PACE = 0.02  # seconds between one producer's submissions


class HaCluster:
    """What `Stage` needs of a cluster, for the HA stack: its database and a way to make sure it runs."""

    def __init__(self, stack: hastack.HaStack, dsn: str) -> None:
        self.stack = stack
        self.dsn = dsn

    def fresh_database(self, scenario: str) -> str:
        prepare_database(self.dsn)
        return self.dsn

    def ensure_running(self) -> None:
        self.stack.start()


class Paced:
    """A submitter that waits ``pace`` seconds before each submission: a steady producer."""

    def __init__(self, submitter, pace: float) -> None:
        self.submitter, self.pace = submitter, pace

    async def submit(self, key: str):
        await asyncio.sleep(self.pace)
        return await self.submitter.submit(key)

    def reset(self) -> None:
        self.submitter.reset()


class Outcome:
    """What the fixture keeps of a run: its figures, and whether every assertion held."""

    def __init__(self) -> None:
        self.passed = False
        self.figures: dict = {}
        self.started = time.monotonic()


@pytest.fixture
def stack():
    # `make test` installs pg_auto_failover (system-deps): missing, this test fails rather than skip.
    if not hastack.installed():
        pytest.fail(hastack.MISSING)
    base = Path(os.environ.get("JOBQUEUE_TEST_TMP", tempfile.gettempdir()))
    root = Path(tempfile.mkdtemp(prefix="jobqueue-ha-", dir=base))
    os.chmod(root, 0o755)
    ha = hastack.HaStack(root / "stack", hastack.free_ports(1 + hastack.DATA_NODES), fast_failover=True)
    outcome = Outcome()
    shutil.rmtree(ARTIFACTS, ignore_errors=True)  # nothing of an earlier run is mistaken for this one's
    try:
        yield ha, ha.start(), outcome
    finally:
        try:
            _keep_artifacts(ha, outcome)
        finally:
            shutil.rmtree(root, ignore_errors=True)


def _keep_artifacts(ha: hastack.HaStack, outcome: Outcome) -> None:
    """The figures, the monitor's events and the nodes' states (read before the stack stops),
    then the pg_autoctl and server logs, beside the worker and API logs; a failed run's all copied
    apart. Each run's outcome is appended to ``ha-failover-runs.jsonl`` (when, the load, passed)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "figures.json").write_text(json.dumps(outcome.figures, indent=1, default=str))
    with (ARTIFACTS.parent / "ha-failover-runs.jsonl").open("a") as runs:
        runs.write(
            json.dumps(
                {
                    "at": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "passed": outcome.passed,
                    "seconds": round(time.monotonic() - outcome.started),
                    "load": [round(x, 1) for x in os.getloadavg()],
                    **{
                        key: outcome.figures.get(key)
                        for key in (
                            "jobs",
                            "lost",
                            "primaries",
                            "promotions",
                            "switches",
                            "crash_switched_after_s",
                            "jobs_per_s_before",
                            "jobs_per_s_after",
                            "worker_shares_after",
                            "top_up_retries",
                            "producers",
                            "faults",
                        )
                    },
                },
                default=str,
            )
            + "\n"
        )
    for name, read in (("monitor-events.json", ha.events), ("node-states.json", ha.state)):
        try:
            (ARTIFACTS / name).write_text(json.dumps(read(), indent=1))
        except (hastack.HaStackError, ValueError) as exc:
            (ARTIFACTS / name).write_text(json.dumps({"unavailable": str(exc)}))
    try:
        ha.stop(immediate=True)
    finally:
        for log in ha.root.glob("*.log"):
            shutil.copy(log, ARTIFACTS / f"pg_autoctl-{log.name}")
        for log in (ha.root / "logs").glob("*.log"):
            shutil.copy(log, ARTIFACTS / log.name)
        if not outcome.passed:
            shutil.copytree(ARTIFACTS, FAILED_ARTIFACTS / time.strftime("%Y%m%d-%H%M%S"))


def _promotions(ha: hastack.HaStack, after: int) -> list[dict]:
    """The nodes the monitor promoted since event ``after`` (each promotion, whatever triggered
    it, has its node report prepare_promotion once), and for each how long the new primary ran as
    wait_primary — with synchronous_standby_names empty, until a standby was a secondary again."""
    events = [e for e in ha.events() if e["eventid"] > after and e["description"].startswith("New state is reported")]
    promotions = []
    for i, event in enumerate(events):
        if event["reportedstate"] != "prepare_promotion":
            continue
        later = [(e["reportedstate"], _instant(e["eventtime"])) for e in events[i:] if e["nodeid"] == event["nodeid"]]
        waiting = next((at for state, at in later if state == "wait_primary"), None)
        primary = next((at for state, at in later if state == "primary" and waiting and at >= waiting), None)
        promotions.append(
            {
                "node": event["nodename"],
                "at": event["eventtime"],
                "wait_primary_s": round((primary - waiting).total_seconds(), 1) if primary else None,
            }
        )
    return promotions


def _switches_per_fault(fault_times: list[str], promotions: list[dict]) -> list[int]:
    """Promotions before the first fault, then in each fault's window (until the next fault)."""
    counts = [0] * (len(fault_times) + 1)
    for promotion in promotions:
        counts[sum(1 for at in fault_times if _instant(at) <= _instant(promotion["at"]))] += 1
    return counts


def _instant(iso: str) -> datetime:
    return datetime.fromisoformat(iso)


def _longest_gap(times: list[float], since: float, until: float) -> tuple[float, float]:
    """(longest stretch without a success that began between ``since`` and ``until``, seconds from
    ``since`` to the success that ended it — which may come after ``until``)."""
    points = [since] + [t for t in times if t >= since]
    gaps = [(b - a, b - since) for a, b in zip(points, points[1:]) if a < until]
    return max(gaps) if gaps else (float("inf"), float("inf"))


def _rate(times: list[float], start: float, end: float) -> float:
    return sum(1 for t in times if start <= t < end) / (end - start)


def _step(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} [ha] {text}", flush=True)


async def _scenario(stack: hastack.HaStack, stage: Stage, figures: dict) -> list[Tally]:
    async with stage.client() as client:
        await client.schedules.add("every-second", "* * * * * *", "record", payload={"ms": 1})
    await stage.seed(stage.record_jobs(SEEDED, 2, max_attempts=3))
    _step("seeded")
    api = await stage.start_api()
    await stage.start_workers()
    python, rest = Tally("python"), Tally("rest")
    batches = itertools.count()

    finished: list[tuple[float, int]] = []  # (when, jobs done) as top_up last read them
    topped = asyncio.Event()  # set: no more top-ups (the window after the faults drains the rest)

    async def top_up() -> None:
        """Keep `HOLD` seconds of work pending until told to stop. Each batch's jobs carry
        idempotency keys, so a batch whose call failed through a switch (`DatabaseUnavailable`:
        maybe stored, maybe not) goes again as it is until it is accepted, and is stored once."""
        batch: list[dict] | None = None
        while not topped.is_set():
            try:
                done, _, pending = await stage.progress()
                finished.append((time.monotonic(), done))
                del finished[:-10]  # the last ~5 s
                (t0, d0), (t1, d1) = finished[0], finished[-1]
                wanted = max(MIN_BACKLOG, round((d1 - d0) / max(t1 - t0, 0.5) * HOLD))
                if batch is None and pending < wanted:
                    batch = [
                        {**job, "idempotency_key": job["payload"]["k"]}
                        for job in stage.record_jobs(wanted, 2, 3, prefix=f"t{next(batches)}-")
                    ]
                if batch is not None:
                    await stage.seed(batch)
                    figures["top_up_batches"] = figures.get("top_up_batches", 0) + 1
                    batch = None
            except DatabaseUnavailable:
                figures["top_up_retries"] = figures.get("top_up_retries", 0) + 1
            await asyncio.sleep(0.5)

    async with stage.client(
        producer_id="ha-python", pool_size=PRODUCERS, pool_timeout=2.0, connect_timeout=2
    ) as client:
        api_key, _ = await client.create_api_key("ha-rest")
        stopping = asyncio.Event()

        def key_stream():
            """Shared by the producers (each key goes to one); ends when asked, so each producer
            finishes the call it is in (as a real one would) instead of being cancelled mid-call."""
            for i in itertools.count():
                if stopping.is_set():
                    return
                yield f"p{i}"

        keys = key_stream()
        tasks = [produce(Paced(PythonSubmitter(client, 2, 3), PACE), keys, python) for _ in range(PRODUCERS)]
        tasks += [
            produce(Paced(RestSubmitter(api.url, api_key, 2, 3, api_may_be_down=False), PACE), keys, rest)
            for _ in range(PRODUCERS)
        ]
        producing = [asyncio.ensure_future(t) for t in tasks]
        topping = asyncio.ensure_future(top_up())
        try:
            await stage.under_way(0.02)
            await asyncio.sleep(WINDOW)

            async def inject(what: str, action, switches: tuple[int, int]) -> Fault:
                """``switches``: the fewest and most promotions the fault may cause."""
                fault = Fault(what, now())
                figures.setdefault("expected_switches", []).append(list(switches))
                before = await stage.processing()
                await asyncio.to_thread(action)
                await stage.pending()  # the harness reaches the primary again
                fault.held = before | await stage.processing()
                stage.run.faults.append(fault)
                return fault

            async def flowing() -> None:
                """Until both paths have had a submission accepted within the last second and jobs
                finish again (the workers' pools reconnect later than the producers'): the next fault
                then hits a recovered system, and pauses are not merged."""
                done = (await stage.progress())[0]
                while (
                    not all(t.accepted_at and t.accepted_at[-1] > time.time() - 1 for t in (python, rest))
                    or (await stage.progress())[0] <= done
                ):
                    await asyncio.sleep(0.1)

            figures["events_before"] = max((e["eventid"] for e in stack.events()), default=0)
            first = stack.primary()
            _step("under way")
            await inject(f"pg_autoctl perform failover ({first.name} -> a standby)", stack.perform_failover, (1, 1))
            second = stack.primary()
            _step("failed over")
            await flowing()
            await asyncio.sleep(2)
            crash = await inject(
                f"crash of {second.name} (keeper and postmaster SIGKILLed)", lambda: stack.crash(second), (1, 1)
            )
            # the monitor promotes one of the others; the crashed node comes back and rejoins as standby
            while (name := await asyncio.to_thread(_primary_name, stack)) in (second.name, None):
                await asyncio.sleep(0.2)
            figures["crash_switched_after_s"] = round((now() - crash.at).total_seconds(), 1)
            third = stack.node(name)
            _step("crash switched")
            figures["primaries"] = [first.name, second.name, third.name]
            await asyncio.to_thread(stack.run, second)
            await asyncio.to_thread(stack.wait_settled)
            await flowing()
            await asyncio.sleep(2)
            _step("settled after crash")
            # a standby dies: the primary goes on acknowledging with the other one; no switch
            standby = next(n for n in stack.data_nodes if n not in (second, third))
            last = await inject(
                f"crash of the standby {standby.name} (keeper and postmaster SIGKILLed)",
                lambda: stack.crash(standby),
                (0, 0),
            )
            await asyncio.sleep(3)  # the monitor notices (the standby is set to catchingup); writes go on
            figures["primary_with_a_standby_down"] = stack.primary().name
            await asyncio.to_thread(stack.run, standby)
            await asyncio.to_thread(stack.wait_settled)
            await flowing()
            figures["primaries"].append(stack.primary().name)
            _step("settled after the standby's crash")
            deadline = time.monotonic() + LEADER_TTL + 5
            while not await _leader_renewed(stage.dsn, since=last.at):
                assert time.monotonic() < deadline, "no leader renewed its lease within the TTL after the faults"
                await asyncio.sleep(0.2)
            _step("leader renewed")
            await asyncio.sleep(2)
            topped.set()
            figures["after_from"] = time.time()
            await asyncio.sleep(WINDOW + 1)
            _step("window after done")
        finally:
            stopping.set()
            topping.cancel()  # no effect when it ended by itself: asked to stop, or dead
            _, pending = await asyncio.wait([*producing, topping], timeout=30)
            for task in pending:
                task.cancel()
            assert not pending, f"{len(pending)} producers still in a call 30 s after being asked to stop"
            for task in producing:
                task.result()  # a producer that crashed says why
            if not topping.cancelled():
                topping.result()  # a top-up that died says why
    _step("producers stopped")
    for fault in stage.run.faults:
        mark_service_back(fault, [python, rest])
    record_producers(stage, [python, rest])
    assert api.process.alive(), "the API process died"
    async with httpx.AsyncClient() as http:
        assert (await http.get(api.url + "/readyz")).status_code == 200
    assert len(stage.fleet.running()) == WORKERS and not stage.fleet.own_exits, stage.fleet.own_exits
    figures["worker_pids"] = sorted(w.pid for w in stage.fleet.running())
    # the leader row names a live worker process and is being renewed
    async with await psycopg.AsyncConnection.connect(stage.dsn) as conn:
        leader_id, fresh = await (
            await conn.execute("SELECT leader_id, expires_at > now() FROM jobqueue.leaders WHERE name = 'maintenance'")
        ).fetchone()
    assert fresh and int(leader_id.split(":")[-2]) in {w.pid for w in stage.fleet.running()}, leader_id
    # the cron stops firing before the drain is judged: a tick fired while the fleet shuts down
    # stays pending (not lost, but not run), and would be counted as an unfinished tick
    async with stage.client() as admin:
        await admin.schedules.pause("every-second")
    await asyncio.sleep(1.5)  # a fire already under way when the pause landed commits meanwhile
    _step(f"progress {await stage.progress()}")
    await stage.drained()
    _step("drained")
    return [python, rest]


def _primary_name(stack: hastack.HaStack) -> str | None:
    """The primary's name, None while the monitor has none (mid-switch)."""
    try:
        return stack.primary().name
    except hastack.HaStackError:
        return None


async def _leader_renewed(dsn: str, since: datetime) -> bool:
    try:
        async with await psycopg.AsyncConnection.connect(dsn, connect_timeout=2) as conn:
            row = await (
                await conn.execute(
                    "SELECT expires_at - make_interval(secs => %s) > %s"
                    " FROM jobqueue.leaders WHERE name = 'maintenance'",
                    (LEADER_TTL, since),
                )
            ).fetchone()
        return bool(row and row[0])
    except psycopg.OperationalError:
        return False


@pytest.mark.timeout(400)
def test_a_drain_with_producers_and_cron_survives_failover_and_failback(stack):
    ha, dsn, outcome = stack
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)  # the harness's own reconnects during switches
    config = Config(
        jobs=SEEDED,
        workers=WORKERS,
        concurrency=CONCURRENCY,
        lease=LEASE,
        leader_ttl=LEADER_TTL,
        timeout=240,
        logdir=ARTIFACTS.parent,
    )
    stage = Stage("ha-failover", HaCluster(ha, dsn), config)
    figures = outcome.figures
    try:
        tallies = asyncio.run(_scenario(ha, stage, figures))
        row = asyncio.run(stage.finish())
    finally:  # a failed run must not leave its processes behind (after finish() these are no-ops)
        stage.fleet.stop()
        if stage.api is not None:
            stage.api.stop()
        figures["promotions"] = _promotions(ha, after=figures.get("events_before", 0))
    figures["jobs"], figures["lost"], figures["notes"] = row.jobs, row.lost, row.notes
    figures["producers"] = [t.summary() for t in tallies]

    # every id a producer got back exists and completed; reruns only of jobs a fault held
    assert row.jobs > SEEDED + MIN_BACKLOG  # the drain was topped up through the faults
    assert row.lost == 0 and row.wrong == 0 and row.duplicates <= row.allowed, row.notes
    assert row.status == "ok", row.notes
    assert all(len(t.accepted) > 100 and not t.unclean for t in tallies), [t.summary() for t in tallies]
    # each fault caused the promotions it may cause, and nothing else did: a node declared dead that
    # was not (a busy machine) is a switch no fault asked for
    switches = _switches_per_fault([f.at.isoformat() for f in stage.run.faults], figures["promotions"])
    figures["switches"] = switches
    assert switches[0] == 0 and all(
        low <= n <= high for n, (low, high) in zip(switches[1:], figures["expected_switches"])
    ), figures["promotions"]
    first, second, third, fourth = figures["primaries"]
    assert second != first and third != second and fourth == third == figures["primary_with_a_standby_down"], figures[
        "primaries"
    ]

    with psycopg.connect(dsn) as conn:
        ticks = [
            t
            for (t,) in conn.execute(
                "SELECT f.fire_at FROM jobqueue.schedule_fires f JOIN jobqueue.schedules s ON s.id = f.schedule_id "
                "WHERE s.name = 'every-second' ORDER BY f.fire_at"
            ).fetchall()
        ]
        unfinished_ticks = conn.execute(
            "SELECT count(*) FROM jobqueue.schedule_fires f JOIN jobqueue.jobs j ON j.id = f.job_id "
            "WHERE j.state <> 'completed'"
        ).fetchone()[0]
        cron_runs = conn.execute(
            "SELECT count(*), count(DISTINCT e.job_id) FROM jobqueue_faults.executions e "
            "JOIN jobqueue.schedule_fires f ON f.job_id = e.job_id"
        ).fetchone()
        runs = [(at.timestamp(), pid) for at, pid in db.run_sync(conn, faults_store.runs())]
    run_times = [at for at, _ in runs]
    # no tick lost (one per second from the first to the last), none fired twice, each job ran
    steps = {b - a for a, b in zip(ticks, ticks[1:])}
    assert len(ticks) > 30 and steps == {timedelta(seconds=1)}, (len(ticks), sorted(steps)[:5])
    assert unfinished_ticks == 0
    assert cron_runs[0] - cron_runs[1] <= len(stage.run.faults), cron_runs  # reruns only of held ones

    faults = stage.run.faults
    figures["faults"] = []
    for fault, following in zip(faults, [*faults[1:], None]):
        at = fault.at.timestamp()
        until = following.at.timestamp() if following else figures["after_from"]
        gap, back = _longest_gap(run_times, at, until)
        enqueue_gap, enqueue_back = max(_longest_gap(sorted(t.accepted_at), at, until) for t in tallies)
        figures["faults"].append(
            {
                "what": fault.what,
                "at": fault.at.isoformat(),
                "window_s": round(until - at, 1),
                "runs_in_window": sum(1 for t in run_times if at <= t <= until),
                "runs_paused_s": round(gap, 1),
                "runs_back_after_s": round(back, 1),
                "enqueues_paused_s": round(enqueue_gap, 1),
                "enqueues_back_after_s": round(enqueue_back, 1),
            }
        )
    first = faults[0].at.timestamp()
    figures["jobs_per_s_before"] = round(_rate(run_times, first - WINDOW, first))
    after = (figures["after_from"], figures["after_from"] + WINDOW)
    figures["jobs_per_s_after"] = round(_rate(run_times, *after))
    shares = Counter(pid for at, pid in runs if after[0] <= at < after[1])
    figures["worker_shares_after"] = {
        str(pid): round(shares[pid] / max(sum(shares.values()), 1), 2) for pid in figures["worker_pids"]
    }
    print(json.dumps(figures, indent=1, default=str))
    # after the last switch every worker does at least half its share of the drain (one stuck on a
    # dead or demoted server would not), and the drain has not collapsed. Its rate against the one
    # before the first fault is no finer test on a shared machine: the load of others moves it
    # (healthy runs measured 159/190 and 448/295 jobs/s, after/before, at load 12 and 7)
    assert len(figures["worker_shares_after"]) == WORKERS, figures
    assert all(share >= 0.5 / WORKERS for share in figures["worker_shares_after"].values()), figures
    assert figures["jobs_per_s_after"] > 0.25 * figures["jobs_per_s_before"], figures
    outcome.passed = True
