"""`make run`: jobqueue on this machine, end to end, for a first look — the demo app served, its jobs
shown finishing, the REST API and the dashboard up, a local admin key to use them with.

In order, each step said on stdout as it starts:

1. **One at a time.** A second `make run` in this checkout while one serves would report the first
   one's API as its own and leave a second worker and maintenance process behind: it names the
   running one (its pid and addresses, from ``.run/make-run.json``) and exits 1 instead. The lock
   is ``.run/make-run.lock``, held while a run lives (released by the kernel however it ends, so a
   killed run leaves nothing stale). An API port that another program holds (another checkout's
   `make run`) is refused the same way, before anything starts: JOBQUEUE_API_PORT picks another.
2. **The database**: JOBQUEUE_DSN, else the durable local cluster in ``.pgdata``
   (`tests.harness.devdb`, on 54329 or a free port), migrated.
3. **Roles**: the worker, the API and the demo producer each log in as a role of their own
   (docs/security.md "Roles"), made by the migrating role with a fresh password each run; a role
   that may not create roles (no CREATEROLE) runs them all as itself, and says so.
4. **Processes**: a worker on `jobqueue.demo:queue` (concurrency 10, its own role), the leader-only
   maintenance services (as the owner: VACUUM and REINDEX need it before PostgreSQL 17), the REST
   API; then the demo jobs, each shown with its final state.
5. **Addresses**: the dashboard (``/`` redirects there) and the API. With ``ONCE=1`` it checks that
   the API answers, says so and stops everything (no key, no curl line for an API about to stop).
6. **The local admin key**, kept in ``.run/admin-key`` (mode 0600) and reused while it is live in
   this database, so each run does not mint another one; when it is not (a new database, a key
   revoked), a new one is made and kept. Either way every other live admin key of producer
   ``local`` — this command's producer: keys earlier runs made and lost — is revoked, so the
   database holds one.
7. **Serving** until Ctrl-C (every process stops gracefully) or until one of its processes ends on
   its own: then the others are stopped too and the exit status is 1.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Iterator

import psycopg

STATE = Path(".run")
LOCK = STATE / "make-run.lock"
INFO = STATE / "make-run.json"
KEY_FILE = STATE / "admin-key"
LOCAL_PRODUCER = "local"
DEMO_APP = "jobqueue.demo:queue"
STOP_GRACE = 35.0  # the worker's shutdown grace (30 s) and a little


def say(text: str) -> None:
    """A line on stdout; none when stdout is gone (`make run | grep …` ended by the same Ctrl-C),
    which must not keep the run from stopping its processes."""
    try:
        print(text, flush=True)
    except OSError:
        pass


def fail(text: str) -> int:
    print(f"make run: {text}", file=sys.stderr, flush=True)
    return 1


def _command(name: str) -> list[str]:
    """A console script of this environment (`jobqueue`, `jobqueue-worker`), so that `ps` shows the
    processes by the names the docs use; ``python -m jobqueue.cli`` where it is not installed."""
    script = Path(sys.executable).parent / name
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "jobqueue.cli", *(["worker"] if name == "jobqueue-worker" else [])]


def jobqueue(*args: str) -> list[str]:
    return [*_command("jobqueue"), *args]


# --- 1. one at a time ------------------------------------------------------------------------


def take_lock() -> IO[str] | None:
    """The lock file, held (until this process ends), or None when another run holds it."""
    STATE.mkdir(exist_ok=True)
    handle = LOCK.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def already_running() -> str:
    try:
        info = json.loads(INFO.read_text())
    except (OSError, ValueError):
        info = {}
    where = f"pid {info['pid']}" if "pid" in info else "its pid unknown yet: it is starting"
    addresses = f": dashboard {info['dashboard']}, API {info['api']}" if "api" in info else ""
    return (
        f"another `make run` is serving from this checkout ({where}){addresses}. Use it, or stop it first "
        "(Ctrl-C in its terminal)."
    )


def port_taken(host: str, port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


# --- 2. and 3. the database and the roles ----------------------------------------------------


def database() -> str | None:
    given = os.environ.get("JOBQUEUE_DSN")
    if given:
        return given
    from tests.harness import devdb

    say("starting the local PostgreSQL in .pgdata (the first time: initdb, a few seconds)…")
    try:
        return devdb.start_cluster(".pgdata", devdb.env_port()).ensure_database("jobqueue")
    except (subprocess.CalledProcessError, OSError, ValueError, KeyError, RuntimeError) as exc:
        detail = exc.stderr.decode(errors="replace").strip() if isinstance(exc, subprocess.CalledProcessError) else exc
        fail(f"the local PostgreSQL did not start: {detail} (see .pgdata/server.log)")
        return None
    except psycopg.OperationalError as exc:  # it started, and refuses connections
        fail(f"the local PostgreSQL did not answer: {exc} (see .pgdata/server.log)")
        return None


def role_dsns(env: dict[str, str]) -> dict[str, str]:
    """The DSN each of worker, api and producer logs in with (see the module docstring, 3.)."""
    secret = secrets.token_hex(16)
    logins = {
        "worker": ["--role", "worker", "jobqueue_local_worker"],
        "api": ["--role", "api", "jobqueue_local_api"],
        "producer": ["--role", "producer", "jobqueue_local_producer", "--producer", "demo"],
    }
    found = {}
    for kind, args in logins.items():
        made = subprocess.run(
            jobqueue("roles", "login", *args, "--password", secret), env=env, capture_output=True, text=True
        )
        if made.returncode != 0:
            why = made.stderr.strip().splitlines()[-1:] or ["no reason given"]
            print(f"note: {why[0]} — so everything runs as JOBQUEUE_DSN's role", file=sys.stderr)
            return {kind: env["JOBQUEUE_DSN"] for kind in logins}
        found[kind] = made.stdout.strip()
    say("worker, API and demo producer log in as jobqueue_local_worker, _api and _producer")
    return found


# --- 6. the local admin key ------------------------------------------------------------------


def local_admin_key(dsn: str) -> tuple[str, bool]:
    """The key in KEY_FILE when it is a live admin key in this database, else a new one (kept
    there); True when it was reused. Other live admin keys of LOCAL_PRODUCER are revoked."""
    from jobqueue.client import Client
    from jobqueue.db import gateway as db
    from jobqueue.store import api_keys as key_store

    kept = KEY_FILE.read_text().strip() if KEY_FILE.exists() else ""
    with Client(dsn, pool_size=1) as client:
        live = None
        if kept:
            with client.connection() as conn:
                live = db.run_sync(conn, key_store.lookup(kept))
        reused = live is not None and live.is_admin and live.producer_id == LOCAL_PRODUCER
        if reused:
            key, mine = kept, live
        else:
            key, mine = client.create_api_key(LOCAL_PRODUCER, role="admin")
            KEY_FILE.touch(mode=0o600)
            KEY_FILE.chmod(0o600)
            KEY_FILE.write_text(key + "\n")
        for other in client.api_keys():
            if other.producer_id == LOCAL_PRODUCER and other.is_admin and other.revoked_at is None:
                if mine is not None and other.id != mine.id:
                    client.revoke_api_key(other.id)
    return key, reused


# --- 4., 5. and 7. the processes -------------------------------------------------------------


def _end_with_parent() -> None:
    """In the child, before it runs its program: Linux's PR_SET_PDEATHSIG, SIGTERM on the parent's death."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


class Processes:
    """The run's processes; `stop` ends them all, gracefully first."""

    def __init__(self) -> None:
        self.running: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, command: list[str], dsn: str) -> None:
        # A process group of its own: Ctrl-C reaches this process only, which then stops each one
        # once (a second signal would make the API's server skip its graceful shutdown). So that
        # none outlives this one however it ends (SIGKILL included), each is sent SIGTERM when it dies.
        self.running[name] = subprocess.Popen(
            command, env=dict(os.environ, JOBQUEUE_DSN=dsn), process_group=0, preexec_fn=_end_with_parent
        )

    def ended(self) -> Iterator[tuple[str, int]]:
        for name, process in self.running.items():
            code = process.poll()
            if code is not None:
                yield name, code

    def stop(self) -> None:
        for process in self.running.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        for process in self.running.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def dashboard_answers(api_url: str) -> bool:
    """``/`` leads a browser to the dashboard's page (a redirect, followed)."""
    import urllib.request

    try:
        with urllib.request.urlopen(api_url + "/", timeout=5) as page:
            return page.status == 200 and page.url.endswith("/dashboard") and b"jobqueue-routes" in page.read()
    except OSError:
        return False


def serve(started: float) -> int:
    from jobqueue.api.serve import wait_ready
    from jobqueue.config import ApiSettings

    api = ApiSettings.from_env(os.environ)
    api_url = f"http://{api.host}:{api.port}"
    if port_taken(api.host, api.port):
        return fail(
            f"port {api.port} on {api.host} is taken by another program (another checkout's `make run`?): "
            f"stop it, or choose another port, e.g. JOBQUEUE_API_PORT={api.port + 1} make run"
        )
    dsn = database()
    if dsn is None:
        return 1
    env = dict(os.environ, JOBQUEUE_DSN=dsn)
    say(f"database: {dsn}")
    if subprocess.run(jobqueue("migrate"), env=env).returncode != 0:
        return fail("jobqueue migrate failed (above)")
    logins = role_dsns(env)
    processes = Processes()
    try:
        processes.start(
            "worker",
            [*_command("jobqueue-worker"), "--app", DEMO_APP, "--concurrency", "10", "--no-maintenance"],
            logins["worker"],
        )
        processes.start("maintenance", jobqueue("maintenance"), dsn)
        processes.start("api", jobqueue("api", "--port", str(api.port)), logins["api"])
        INFO.write_text(json.dumps({"pid": os.getpid(), "api": api_url, "dashboard": f"{api_url}/dashboard"}))
        demo = subprocess.run(jobqueue("demo", "--timeout", "30"), env=dict(env, JOBQUEUE_DSN=logins["producer"]))
        if not wait_ready(api_url, timeout=30):
            return fail(f"the REST API did not become ready at {api_url} (its log is above)")
        if not dashboard_answers(api_url):
            return fail(f"{api_url}/ did not lead to the dashboard (the API's log is above)")
        took = time.monotonic() - started
        if os.environ.get("ONCE"):
            say(f"the REST API and the dashboard answered at {api_url} ({took:.0f} s); ONCE=1: stopping everything")
            return 0 if demo.returncode == 0 else fail("the demo jobs did not all finish (above)")
        if demo.returncode != 0:
            print("note: the demo jobs did not all finish (above); serving anyway", file=sys.stderr)
        key, reused = local_admin_key(dsn)
        kept = "the same as last time, kept in .run/admin-key" if reused else "new, kept in .run/admin-key"
        say("")
        say(f"dashboard: {api_url}/dashboard  (paste the admin key into its key field)")
        say(f"REST API:  {api_url}  (OpenAPI: {api_url}/schema/swagger)")
        say(f"local admin key ({kept}): {key}")
        say(
            f"  curl -s -X POST {api_url}/jobs -H 'Authorization: Bearer {key}' -H 'Content-Type: application/json'"
            ' -d \'{"job_type": "echo", "payload": {"hi": 1}}\''
        )
        say(f"a worker serves {DEMO_APP}; in another terminal, enqueue more with")
        say(f"  export JOBQUEUE_DSN={dsn}")
        say("  .venv/bin/jobqueue enqueue echo --payload '{\"hi\": 1}'")
        say(f"ready in {took:.0f} s; Ctrl-C stops everything")
        while True:
            for name, code in processes.ended():
                return fail(f"the {name} process ended (exit status {code}); stopping the others")
            time.sleep(0.5)
    finally:
        if processes.running:
            say("stopping the worker, the maintenance services and the API…")
            processes.stop()


def _stop_on_signal(signum: int, _frame: object) -> None:
    """SIGTERM (`kill`) and SIGHUP (the terminal closed) stop the run as Ctrl-C does."""
    raise KeyboardInterrupt


def main() -> int:
    started = time.monotonic()
    lock = take_lock()
    if lock is None:
        return fail(already_running())
    INFO.write_text(json.dumps({"pid": os.getpid()}))
    # Ctrl-C raises KeyboardInterrupt even where a shell started this with SIGINT ignored (`make run &`)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _stop_on_signal)
    signal.signal(signal.SIGHUP, _stop_on_signal)
    try:
        return serve(started)
    except KeyboardInterrupt:
        return 0
    finally:
        INFO.unlink(missing_ok=True)
        lock.close()


if __name__ == "__main__":
    sys.exit(main())
