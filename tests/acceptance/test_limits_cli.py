"""`jobqueue limits list|set|clear` as a user types them; bad input exits 2 naming the field and
writes nothing."""

from __future__ import annotations

import json

from tests.acceptance.test_cli import jobqueue


def test_limits_set_list_and_clear(dsn, conn):
    set_ = jobqueue("limits", "set", "--job-type", "call_partner", "--concurrency", "5", "--rate", "10/s", dsn=dsn)
    assert set_.returncode == 0, set_.stderr
    limit = json.loads(set_.stdout)  # the limit as it now is, as `limits list --json` writes each
    assert (limit["scope"], limit["name"], limit["concurrency"], limit["rate_text"], limit["set_by"]) == (
        "job_type",
        "call_partner",
        5,
        "10/s",
        "admin",
    )
    table = jobqueue("limits", "list", dsn=dsn).stdout.splitlines()
    assert table[0].split() == [
        "SCOPE",
        "NAME",
        "CONCURRENCY",
        "RUNNING",
        "RATE",
        "WINDOW_STARTS",
        "SET_BY",
        "DECLARED_BY",
    ]
    assert table[1].split() == ["job_type", "call_partner", "5", "0", "10/s", "0", "admin", "-"]
    assert jobqueue("limits", "set", "--queue", "exports", "--rate", "100/m", dsn=dsn).returncode == 0
    listed = json.loads(jobqueue("limits", "list", "--json", dsn=dsn).stdout)
    assert [(lim["scope"], lim["name"], lim["concurrency"], lim["rate_text"]) for lim in listed] == [
        ("job_type", "call_partner", 5, "10/s"),
        ("queue", "exports", None, "100/m"),
    ]
    cleared = jobqueue("limits", "clear", "--queue", "exports", dsn=dsn)
    assert (cleared.returncode, cleared.stdout.strip()) == (0, "cleared")
    gone = jobqueue("limits", "clear", "--queue", "exports", dsn=dsn)
    assert gone.returncode == 2 and "no limit on queue 'exports'" in gone.stderr
    assert conn.execute("SELECT scope, name FROM jobqueue.job_limits").fetchall() == [("job_type", "call_partner")]


def test_bad_limits_exit_2_naming_the_field_and_write_nothing(dsn, conn):
    # (each value's checks are in tests/unit/test_limits.py; here, that the command line reports them)
    for name, args, says in (
        ("api", ["--concurrency", "-1"], "concurrency:"),
        ("api", ["--rate", "ten/s"], "rate:"),
        ("t" * 300, ["--concurrency", "1"], "name: must be at most 255 characters"),
    ):
        refused = jobqueue("limits", "set", "--job-type", name, *args, dsn=dsn)
        assert refused.returncode == 2 and says in refused.stderr, (args, refused.stderr)
    both = jobqueue("limits", "set", "--job-type", "api", "--queue", "q", "--concurrency", "1", dsn=dsn)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    assert conn.execute("SELECT count(*) FROM jobqueue.job_limits").fetchone()[0] == 0


def test_setting_one_part_keeps_the_other(dsn, conn):
    """Before, `limits set --concurrency 2` silently dropped the code's 10/s rate."""
    conn.execute(
        "INSERT INTO jobqueue.job_limits (scope, name, concurrency, rate, period_seconds, declared_by) "
        "VALUES ('job_type', 'call_partner', 5, 10, 1, 'shop')"
    )
    concurrency = json.loads(
        jobqueue("limits", "set", "--job-type", "call_partner", "--concurrency", "2", dsn=dsn).stdout
    )
    assert (concurrency["concurrency"], concurrency["rate_text"], concurrency["set_by"]) == (2, "10/s", "admin")
    rate = json.loads(jobqueue("limits", "set", "--job-type", "call_partner", "--rate", "5/m", dsn=dsn).stdout)
    assert (rate["concurrency"], rate["rate_text"]) == (2, "5/m")
    removed = json.loads(jobqueue("limits", "set", "--job-type", "call_partner", "--rate", "none", dsn=dsn).stdout)
    assert (removed["concurrency"], removed["rate_text"]) == (2, None)
    nothing_left = jobqueue("limits", "set", "--job-type", "call_partner", "--concurrency", "none", dsn=dsn)
    assert nothing_left.returncode == 2 and "concurrency: removing it leaves this limit nothing" in nothing_left.stderr
    assert conn.execute("SELECT concurrency, rate FROM jobqueue.job_limits").fetchall() == [(2, None)]
    neither = jobqueue("limits", "set", "--job-type", "call_partner", dsn=dsn)
    assert neither.returncode == 2 and "give a concurrency, a rate, or both" in neither.stderr
