"""The shipped Prometheus rules: valid for promtool, firing (and not) as SPEC says, and written
over metric names that /metrics really serves. promtool comes from Debian's `prometheus`
package, which `make system-deps` installs: missing, this test fails rather than skips."""

from __future__ import annotations

import re
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest

from jobqueue.observability import metrics, prometheus
from jobqueue.store.metrics import DeadCount, QueueCounts, TypeTotals, WorkerRow

RULES_DIR = Path(__file__).resolve().parents[3] / "deploy" / "prometheus"


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool is missing: `make system-deps` installs Debian's prometheus package"
    return path


def _run(*command: str) -> str:
    result = subprocess.run(command, cwd=RULES_DIR, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_rules_pass_promtool_check(promtool):
    assert "SUCCESS: 7 rules found" in _run(promtool, "check", "rules", "alerts.yml")


def test_rules_fire_on_the_spec_thresholds(promtool):
    assert "SUCCESS" in _run(promtool, "test", "rules", "alerts_test.yml")


def test_prometheus_config_for_compose_is_valid(promtool):
    _run(promtool, "check", "config", "prometheus.yml")


def test_rules_name_only_metrics_that_metrics_serves():
    now = datetime.now(timezone.utc)
    snapshot = metrics.Snapshot(
        measured_at=now,
        submitted=1,
        queues=[QueueCounts("q", 2, 1, 0, 0, 0, 1.0)],
        dead=[DeadCount("q", "t", 1)],
        totals=[TypeTotals("q", "t", 1, 0, 1.0, (1,))],
        workers=[WorkerRow("w", "h", 1, ("q",), 1, "running", 0, 0, 0.5, 1.0, now, now, 0, True)],
        collect_seconds=0.0,
    )
    served = {
        line.split("{")[0].split(" ")[0]
        for line in prometheus.render(snapshot).splitlines()
        if line and not line.startswith("#")
    }
    rules = (RULES_DIR / "alerts.yml").read_text()
    used = set(re.findall(r"\bjobqueue_[a-z_]+", rules))
    assert used and used <= served, used - served
    assert set(re.findall(r"alert: (\w+)", rules)) == {
        "HighFailureRate",
        "QueueBacklog",
        "StuckJobs",
        "DLQBreach",
        "WorkerDown",
        "StuckProcessing",
        "DeadlineOverrun",
    }
