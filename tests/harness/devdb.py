"""A local PostgreSQL cluster for `make run`, `make bench` and the test suite, when no DSN is given.

Uses the machine's own `initdb`/`pg_ctl` (found on PATH, via `pg_config --bindir`, or under
/usr/lib/postgresql/*/bin). Postgres refuses to run as root, so when we are root the cluster is
created and started as the unprivileged `postgres` user (or JOBQUEUE_PG_USER). The socket lives
in the data directory and the server listens on 127.0.0.1 only.

    python -m tests.harness.devdb start --datadir .pgdata [--port 54329] [--fast]   prints the DSN
    python -m tests.harness.devdb stop --datadir .pgdata

The port: a cluster already running in the data directory keeps the one it listens on (read from
its ``postmaster.pid``, so a DSN printed earlier stays true); a new start takes ``--port`` or
JOBQUEUE_DEV_PORT when given, else 54329 — or, when something else listens there (another
checkout's cluster on this machine), a free port, said on stderr.
"""

from __future__ import annotations

import argparse
import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psycopg


def pg_bindir() -> Path:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    pg_config = shutil.which("pg_config")
    if pg_config:
        bindir = Path(
            subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
        )
        if (bindir / "pg_ctl").exists():
            return bindir
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    if candidates:
        return Path(candidates[-1]).parent
    raise RuntimeError("no PostgreSQL server binaries (initdb/pg_ctl) found: install postgresql or set JOBQUEUE_DSN")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_user(user: str | None = None) -> str | None:
    """The unprivileged user PostgreSQL (and pg_autoctl) must run as when we are root — ``user``,
    else JOBQUEUE_PG_USER, else ``postgres`` (KeyError when it does not exist); None when we are not
    root and run them as ourselves."""
    if os.geteuid() != 0:
        return None
    name = user or os.environ.get("JOBQUEUE_PG_USER", "postgres")
    pwd.getpwnam(name)
    return name


def as_user(run_as: str | None, command: list[str]) -> list[str]:
    """``command`` run as ``run_as`` (see `server_user`), or as it is."""
    return ["runuser", "-u", run_as, "--", *command] if run_as else command


def hand_over(directory: Path, run_as: str | None) -> None:
    """Create ``directory`` and give it to ``run_as``, which must also be able to reach it (every
    parent traversable), or initdb would fail with a less helpful error."""
    directory.mkdir(parents=True, exist_ok=True)
    if run_as:
        entry = pwd.getpwnam(run_as)
        os.chown(directory, entry.pw_uid, entry.pw_gid)
        for parent in list(directory.parents)[:-1]:
            if parent.stat().st_mode & 0o001 == 0:
                raise RuntimeError(f"{parent} is not traversable by {run_as}; choose another data directory")


class LocalCluster:
    """A cluster in ``datadir``; ``fast`` turns fsync off (tests), otherwise it is durable (bench)."""

    def __init__(self, datadir: Path | str, port: int, *, fast: bool = False, user: str | None = None) -> None:
        self.datadir = Path(datadir).resolve()
        self.port = port
        self.fast = fast
        self.bindir = pg_bindir()
        self.run_as = server_user(user)

    def _cmd(self, *args: str) -> list[str]:
        return as_user(self.run_as, [str(self.bindir / args[0]), *args[1:]])

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    @property
    def initialised(self) -> bool:
        return (self.datadir / "PG_VERSION").exists()

    def init(self) -> None:
        hand_over(self.datadir, self.run_as)
        subprocess.run(
            self._cmd(
                "initdb", "-D", str(self.datadir), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-instructions"
            ),
            check=True,
            capture_output=True,
        )

    def running(self) -> bool:
        return (
            subprocess.run(self._cmd("pg_ctl", "status", "-D", str(self.datadir)), capture_output=True).returncode == 0
        )

    def start(self) -> None:
        if not self.initialised:
            self.init()
        if self.running():
            self.port = self.listening_port() or self.port
            return
        options = [f"-p {self.port}", f"-k {self.datadir}", "-c listen_addresses=127.0.0.1", "-c max_connections=300"]
        if self.fast:
            # 64MB, not 256MB: CREATE/DROP DATABASE walk all of shared_buffers, and the suite makes a
            # database per test (measured: 0.025 s each at 64MB, 0.22-0.4 s at 256MB)
            options += [
                "-c shared_buffers=64MB",
                "-c fsync=off",
                "-c synchronous_commit=off",
                "-c full_page_writes=off",
            ]
        else:
            options += ["-c shared_buffers=256MB"]
        subprocess.run(
            self._cmd(
                "pg_ctl",
                "start",
                "-w",
                "-t",
                "60",
                "-D",
                str(self.datadir),
                "-l",
                str(self.datadir / "server.log"),
                "-o",
                " ".join(options),
            ),
            check=True,
            capture_output=True,
        )
        self.wait_ready()

    def listening_port(self) -> int | None:
        """The port of the server running in the data directory: the fourth line of its
        ``postmaster.pid`` (PostgreSQL's documented layout), or None."""
        try:
            lines = (self.datadir / "postmaster.pid").read_text().splitlines()
            return int(lines[3])
        except (OSError, IndexError, ValueError):
            return None

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.dsn(), connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self, mode: str = "fast") -> None:
        if self.initialised and self.running():
            subprocess.run(
                self._cmd("pg_ctl", "stop", "-w", "-m", mode, "-D", str(self.datadir)), check=True, capture_output=True
            )

    def ensure_database(self, dbname: str) -> str:
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone():
                conn.execute(f'CREATE DATABASE "{dbname}"')  # name from our own command line, quoted
        return self.dsn(dbname)


DEFAULT_PORT = 54329


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def start_port(requested: int | None) -> int:
    """The port a cluster that is not running yet starts on: ``requested`` (a --port or
    JOBQUEUE_DEV_PORT the user chose, even when taken: the start then says so), else the default,
    else — the default being taken by something else — a free one."""
    if requested is not None:
        return requested
    if not port_in_use(DEFAULT_PORT):
        return DEFAULT_PORT
    port = free_port()
    print(f"devdb: port {DEFAULT_PORT} is taken (another cluster?); starting on {port}", file=sys.stderr)
    return port


def start_cluster(datadir: Path | str, port: int | None = None, *, fast: bool = False) -> LocalCluster:
    """The cluster in ``datadir``, started (on its own port if it already runs, see `start_port`)."""
    cluster = LocalCluster(datadir, port or DEFAULT_PORT, fast=fast)
    if not (cluster.initialised and cluster.running()):
        cluster.port = start_port(port)
    cluster.start()
    return cluster


def env_port() -> int | None:
    text = os.environ.get("JOBQUEUE_DEV_PORT", "").strip()
    if not text:
        return None
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise SystemExit(f"devdb: JOBQUEUE_DEV_PORT must be a port number from 1 to 65535 (got {text!r})")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.devdb")
    parser.add_argument("action", choices=["start", "stop", "dsn"])
    parser.add_argument("--datadir", default=".pgdata")
    parser.add_argument("--port", type=int, help="default: JOBQUEUE_DEV_PORT, else 54329 or a free port")
    parser.add_argument("--dbname", default="jobqueue")
    parser.add_argument("--fast", action="store_true", help="fsync off (tests only)")
    args = parser.parse_args(argv)
    if not args.dbname.replace("_", "").isalnum():
        parser.error("--dbname must be letters, digits and underscores")
    requested = args.port or env_port()
    try:
        if args.action == "start":
            print(start_cluster(args.datadir, requested, fast=args.fast).ensure_database(args.dbname))
        elif args.action == "stop":
            LocalCluster(args.datadir, requested or DEFAULT_PORT).stop()
        else:
            cluster = LocalCluster(args.datadir, requested or DEFAULT_PORT)
            if cluster.initialised and cluster.running():
                cluster.port = cluster.listening_port() or cluster.port
            print(cluster.dsn(args.dbname))
    except subprocess.CalledProcessError as exc:  # initdb/pg_ctl said why on stderr
        detail = (exc.stderr or b"").decode(errors="replace").strip() if isinstance(exc.stderr, bytes) else exc.stderr
        print(
            f"devdb: {' '.join(map(str, exc.cmd))} failed: {detail or exc} (log: {args.datadir}/server.log)",
            file=sys.stderr,
        )
        return 1
    except (psycopg.OperationalError, OSError, KeyError) as exc:
        print(f"devdb: {exc} (log: {args.datadir}/server.log)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
