"""A real PgBouncer (Debian's package, installed by `make install`) in transaction pooling mode in
front of the test server, with a config file of its own in a temp dir.

Like the throwaway cluster (tests.harness.devdb) it runs as the unprivileged ``postgres`` user when the
tests run as root. Every database of the server is reachable through it under its own name.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.harness.devdb import free_port

MISSING = "pgbouncer is not installed: `make install` installs Debian's package (Makefile target system-deps)"


def binary() -> str | None:
    debian = "/usr/sbin/pgbouncer"  # not on a non-root PATH
    return shutil.which("pgbouncer") or (debian if os.access(debian, os.X_OK) else None)


class PgBouncer:
    def __init__(self, server_dsn: str, *, pool_size: int = 8) -> None:
        found = binary()
        if found is None:
            raise RuntimeError(MISSING)
        self.server = conninfo_to_dict(server_dsn)
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="jobqueue-pgbouncer-"))
        os.chmod(self.dir, 0o755)
        self.log = self.dir / "pgbouncer.log"
        self.run_as = os.environ.get("JOBQUEUE_PG_USER", "postgres") if os.geteuid() == 0 else None
        target = {"host": self.server.get("host", "127.0.0.1"), "port": self.server.get("port", 5432)}
        if self.server.get("password"):  # a JOBQUEUE_TEST_DSN server that wants one
            target.update(user=self.server.get("user", "postgres"), password=self.server["password"])
        user = self.server.get("user", "postgres")
        (self.dir / "userlist.txt").write_text(f'"{user}" ""\n')
        (self.dir / "pgbouncer.ini").write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = {make_conninfo(**target)}",
                    "[pgbouncer]",
                    "listen_addr = 127.0.0.1",
                    f"listen_port = {self.port}",
                    "unix_socket_dir =",
                    "auth_type = trust",
                    f"auth_file = {self.dir / 'userlist.txt'}",
                    "pool_mode = transaction",
                    f"default_pool_size = {pool_size}",
                    "max_client_conn = 500",
                    f"logfile = {self.log}",
                    f"admin_users = {user}",
                    "",
                ]
            )
        )
        if self.run_as:
            entry = pwd.getpwnam(self.run_as)
            for path in (self.dir, *self.dir.iterdir()):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        # Its own uid directly (not via runuser, whose wrapper waits 2 s after forwarding SIGTERM).
        as_user = (
            {"user": self.run_as, "group": pwd.getpwnam(self.run_as).pw_gid, "extra_groups": []} if self.run_as else {}
        )
        self.process = subprocess.Popen(
            [found, str(self.dir / "pgbouncer.ini")], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, **as_user
        )
        self._wait_ready()

    def dsn_for(self, server_dsn: str) -> str:
        """``server_dsn``'s database and user, through this PgBouncer."""
        params = conninfo_to_dict(server_dsn)
        params.update(host="127.0.0.1", port=str(self.port))
        params.pop("password", None)
        return make_conninfo(**params)

    def admin(self, command: str) -> None:
        """Run a command on PgBouncer's admin console, e.g. ``RECONNECT``: server connections are
        replaced once released, so a role's new settings reach every one of them."""
        console = make_conninfo(
            host="127.0.0.1", port=str(self.port), dbname="pgbouncer", user=self.server.get("user", "postgres")
        )
        with psycopg.connect(console, autocommit=True, prepare_threshold=None) as conn:
            conn.execute(command)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def _wait_ready(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited with {self.process.returncode}: {self.log_text()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"pgbouncer did not listen on {self.port}: {self.log_text()}") from None
                time.sleep(0.05)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
