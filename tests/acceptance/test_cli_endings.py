"""How a one-shot `jobqueue` command ends when it is not its own doing (jobqueue.cli.common): Ctrl-C
is one line and exit 130 (it was a 20-70-line KeyboardInterrupt traceback), a reader that closes the
pipe early ends it quietly with 141 (a BrokenPipeError traceback), and an error the database raises
is its message and hint on one line (5-12 lines of PL/pgSQL CONTEXT, or a traceback with the whole
statement in it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psycopg
import pytest

from tests.support.factories import make_job
from tests.support.waiting import wait_until

JOBQUEUE = [sys.executable, "-c", "import sys; from jobqueue.cli import main; sys.exit(main())"]


def _start(dsn: str, *args: str, **options) -> subprocess.Popen:
    # a lock timeout longer than the test, so the command is still waiting when it is interrupted
    env = dict(os.environ, JOBQUEUE_DSN=dsn, JOBQUEUE_LOCK_TIMEOUT="120")
    return subprocess.Popen([*JOBQUEUE, *args], env=env, text=True, **options)


def _waiting_on_a_lock(conn: psycopg.Connection) -> bool:
    waiting = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'jobqueue-cli%' AND wait_event_type = 'Lock'"
    ).fetchone()[0]
    return waiting > 0


@pytest.mark.parametrize(
    "command",
    [("jobs", "list"), ("enqueue", "echo", "--payload", '{"n": 1}'), ("dlq", "retry-all"), ("queues", "list")],
    ids=lambda c: " ".join(c[:2]),
)
def test_ctrl_c_of_a_blocked_command_is_one_line_and_exit_130(dsn, conn, command):
    with psycopg.connect(dsn) as locker:
        locker.execute("LOCK TABLE jobqueue.jobs IN ACCESS EXCLUSIVE MODE")
        blocked = _start(dsn, *command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_until(lambda: _waiting_on_a_lock(conn), timeout=30, message="the command waits on the lock")
            blocked.send_signal(signal.SIGINT)
            out, err = blocked.communicate(timeout=15)
        finally:
            blocked.kill()
        locker.rollback()
    assert (blocked.returncode, err, out) == (130, "interrupted\n", "")
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs").fetchone()[0] == 0  # the enqueue did not happen
    # its statement was cancelled with it, not left waiting on the server
    wait_until(lambda: not _waiting_on_a_lock(conn), timeout=10, message="the interrupted statement is gone")


def test_a_pipe_closed_early_ends_the_command_quietly(conn, dsn):
    for n in range(300):  # ~200 KB of JSON: more than a pipe holds, so the writer meets the closed end
        make_job(conn, payload={"n": n, "padding": "x" * 400})
    listing = _start(dsn, "jobs", "list", "--json", "--limit", "300", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = listing.stdout.readline()  # what `| head -1` does: one line, then the read end is closed
    listing.stdout.close()
    err = listing.stderr.read()
    listing.wait(timeout=30)
    assert first == "{\n"
    assert (listing.returncode, err) == (141, "")


def test_the_pipe_recipe_also_under_a_shell(conn, dsn):
    """The user's own words, `jobqueue jobs list --json | head -3`, through bash with pipefail."""
    for n in range(300):
        make_job(conn, payload={"n": n, "padding": "x" * 400})
    command = " ".join(f"'{part}'" for part in JOBQUEUE) + " jobs list --json --limit 300 | head -3"
    ran = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {command}"],
        env=dict(os.environ, JOBQUEUE_DSN=dsn),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.stdout.splitlines()[:2] == ["{", '  "jobs": [']
    assert (ran.returncode, ran.stderr) == (141, "")


REFUSING_TRIGGER = """
CREATE FUNCTION public.refuse_inner() RETURNS void LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'no jobs on Sundays' USING ERRCODE = '{code}', HINT = 'try again on Monday'; END $$;
CREATE FUNCTION public.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM public.refuse_inner(); RETURN NEW; END $$;
CREATE TRIGGER refuse BEFORE INSERT ON jobqueue.jobs FOR EACH ROW EXECUTE FUNCTION public.refuse();
"""


@pytest.mark.parametrize(
    "code, says",
    [
        # P0001, a plain RAISE: no translation of jobqueue's own, so psycopg's error reached the user
        ("P0001", "error: no jobs on Sundays (hint: try again on Monday)\n"),
        # 55000 is an OperationalError: jobqueue reports those as the database being unavailable
        ("55000", "error: database unavailable: no jobs on Sundays (hint: try again on Monday)\n"),
    ],
)
def test_an_error_raised_in_the_database_is_its_message_and_hint_on_one_line(dsn, conn, code, says):
    """A trigger of the user's DBA refuses every job, two PL/pgSQL frames below jobqueue.enqueue's
    own three: str() of the error has a CONTEXT line for each, and the statement's text."""
    conn.execute(REFUSING_TRIGGER.replace("{code}", code))
    ran = subprocess.run(
        [*JOBQUEUE, "enqueue", "echo"], env=dict(os.environ, JOBQUEUE_DSN=dsn), capture_output=True, text=True
    )
    assert (ran.returncode, ran.stderr, ran.stdout) == (2, says, "")
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs").fetchone()[0] == 0
