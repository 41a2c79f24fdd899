"""`jobqueue schedule …` as a user runs it: add, list, pause, resume, run-now, remove, and clear
errors for bad input."""

from __future__ import annotations

import json
import uuid

from tests.acceptance.test_cli import jobqueue


def test_schedule_lifecycle(dsn, conn):
    added = jobqueue(
        "schedule",
        "add",
        "nightly",
        "30 2 * * *",
        "report",
        "--timezone",
        "Europe/Berlin",
        "--payload",
        '{"kind": "daily"}',
        "--priority",
        "high",
        "--misfire",
        "fire_all",
        "--misfire-limit",
        "5",
        dsn=dsn,
    )
    assert added.returncode == 0, added.stderr
    assert "added schedule nightly" in added.stdout and "next fire: 20" in added.stdout

    listed = jobqueue("schedule", "list", dsn=dsn)
    header, line = listed.stdout.splitlines()[:2]
    assert header.split()[:3] == ["NAME", "CRON", "TIMEZONE"]
    assert line.split()[0] == "nightly" and "Europe/Berlin" in line and "fire_all(5)" in line and "cli" in line

    assert jobqueue("schedule", "pause", "nightly", dsn=dsn).stdout.strip() == "paused schedule nightly"
    assert json.loads(jobqueue("schedule", "list", "--json", dsn=dsn).stdout)[0]["enabled"] is False
    assert jobqueue("schedule", "resume", "nightly", dsn=dsn).returncode == 0

    ran = jobqueue("schedule", "run-now", "nightly", dsn=dsn)
    job_id = uuid.UUID(ran.stdout.strip())
    assert conn.execute(
        "SELECT job_type, payload, priority, producer_id FROM jobqueue.jobs WHERE id = %s", (job_id,)
    ).fetchone() == ("report", {"kind": "daily"}, 1, "schedule:nightly")

    assert jobqueue("schedule", "remove", "nightly", dsn=dsn).returncode == 0
    assert conn.execute("SELECT count(*) FROM jobqueue.schedules").fetchone()[0] == 0


def test_bad_schedules_are_clear_errors(dsn, conn):
    for args, expected in (
        (("bad", "61 * * * *", "x"), "cron:"),
        (("bad", "* * *", "x"), "must have 5 fields"),
        (("bad", "* * * * *", "x", "--timezone", "Mars/Olympus"), "timezone: unknown time zone"),
        (("bad", "* * * * *", "x", "--payload", "{nope"), "payload:"),
    ):
        result = jobqueue("schedule", "add", *args, dsn=dsn)
        assert result.returncode == 2 and expected in result.stderr and "Traceback" not in result.stderr, result.stderr
    missing = jobqueue("schedule", "pause", "nope", dsn=dsn)
    assert missing.returncode == 2 and "no schedule named 'nope'" in missing.stderr
    assert conn.execute("SELECT count(*) FROM jobqueue.schedules").fetchone()[0] == 0
