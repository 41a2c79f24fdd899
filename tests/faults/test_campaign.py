"""The fault campaign's scenarios as tests: each one on a small drain (a few hundred jobs instead of
the campaign's 10,000), on a durable throwaway cluster this module owns and restarts. Each asserts what the
campaign's table reports: nothing lost, no duplicate run that at-least-once does not allow, no job
in a wrong end state, no wedge, no unclean error — and that the scenario's faults did happen."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import time
from pathlib import Path

import pytest

from tests.harness.faults.cluster import FaultCluster
from tests.harness.faults.report import Row
from tests.harness.faults.scenarios import Config, run_scenario
from tests.support import pg

# xdist_group: `make test` runs 2 workers; the module's cluster is made once, on one of them
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240), pytest.mark.xdist_group("fault_cluster")]


@pytest.fixture(scope="module")
def fault_cluster():
    # durable, as the campaign's own: with synchronous_commit off a crash forgets commits that
    # were already answered, and the campaign would count those jobs lost
    server = pg.TestServer.throwaway(durable=True)
    try:
        yield FaultCluster(server.cluster)
    finally:
        server.close()


@pytest.fixture
def config(tmp_path) -> Config:
    # 300 jobs on 2 workers x 5, each job sleeping so a drain takes ~5-7 s: long enough for faults.
    return Config(
        jobs=300, workers=2, concurrency=5, drain_scale=0.3, timeout=150, logdir=tmp_path, huge_result_chars=16 * 2**20
    )


#: A failed scenario's logs are copied here: pytest keeps only its last three temporary roots, so
#: a busy machine's later runs removed the logs of a failure before anyone could read them.
FAILED_ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "faults-failed"


def scenario(fault_cluster: FaultCluster, config: Config, name: str) -> Row:
    row = asyncio.run(run_scenario(name, fault_cluster, config))
    failed = row.lost or row.duplicates != row.allowed or row.wrong or row.status != "ok"
    if failed and row.logs:
        kept = FAILED_ARTIFACTS / f"{time.strftime('%Y%m%d-%H%M%S')}-{name}"
        shutil.copytree(row.logs, kept, dirs_exist_ok=True)
        (kept / "row.txt").write_text(f"{row}\n")
        row = dataclasses.replace(row, logs=str(kept))
    why = f"{name}: {row.notes} (logs: {row.logs})"
    assert row.lost == 0, why
    assert row.duplicates == row.allowed, why
    assert row.wrong == 0, why
    assert row.status == "ok", why
    return row


def test_sigkill_of_workers_mid_drain_loses_nothing(fault_cluster, config):
    row = scenario(fault_cluster, config, "sigkill")
    assert row.faults and all(f["what"].startswith("SIGKILL worker-") for f in row.faults)
    assert row.recovery is not None


def test_a_stopped_worker_past_its_lease_changes_nothing_when_it_continues(fault_cluster, config):
    row = scenario(fault_cluster, config, "sigstop")
    assert row.faults and all(f["held"] >= 0 for f in row.faults)


def test_postgres_crash_mid_drain_loses_nothing_and_burns_no_attempt(fault_cluster, config):
    row = scenario(fault_cluster, config, "pg-crash")
    assert row.faults[0]["what"].startswith("restart -m immediate")


def test_postgres_fast_restart_mid_drain_loses_nothing(fault_cluster, config):
    row = scenario(fault_cluster, config, "pg-restart")
    assert row.faults[0]["what"].startswith("restart -m fast")


def test_terminated_backends_mid_drain_lose_nothing(fault_cluster, config):
    row = scenario(fault_cluster, config, "pg-terminate")
    assert row.faults[0]["what"].startswith("pg_terminate_backend")


def test_producers_get_clean_errors_during_a_restart_and_every_success_is_stored(fault_cluster, config):
    row = scenario(fault_cluster, config, "producers")
    assert "python:" in row.notes and "rest:" in row.notes and "UNCLEAN" not in row.notes
    assert row.recovery is not None


def test_a_killed_api_process_loses_no_accepted_job(fault_cluster, config):
    row = scenario(fault_cluster, config, "api-kill")
    assert len(row.faults) == 3


def test_poison_jobs_leave_the_worker_healthy_and_every_other_job_completes(fault_cluster, config):
    row = scenario(fault_cluster, config, "poison")
    assert "NUL payload refused (payload)" in row.notes
    for kind in ("block", "hang", "not_json"):
        assert f"{kind}: " in row.notes and "dead_letter" in row.notes.split(f"{kind}: ")[1].split(";")[0]
    assert "huge: 1 completed" in row.notes
