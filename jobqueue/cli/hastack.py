"""A pg_auto_failover stack on one machine: `make ha`, `make ha-stop` and the failover test.

Three local PostgreSQL clusters under one folder (default ``.pgdata-ha``), each run by its own
``pg_autoctl run`` supervisor: a *monitor* (port P) that holds the formation's state and decides
failovers, and two *data nodes* (ports P+1, P+2), a primary and a synchronous standby. With two
data nodes pg_auto_failover keeps ``number_sync_standbys`` at 0 and sets
``synchronous_standby_names = 'ANY 1 (…)'``: a commit is acknowledged once the standby has it, so a
failover to the standby loses no acknowledged commit; should the standby die, the primary goes on
alone (``wait_primary``) rather than blocking writes. Clients find the primary themselves with the
multi-host DSN (`HaStack.dsn`, ``target_session_attrs=read-write``).

pg_autoctl keeps its configuration, state and pid files under the folder too (the ``XDG_*``
directories it honours), so nothing outside it is touched. As root, everything runs as the
unprivileged user `jobqueue.cli.devdb.server_user` names; everything listens on 127.0.0.1 only, without
TLS and with ``trust`` authentication (loopback only: docs/high-availability.md says what
production uses instead). The settings in `NODE_SETTINGS` replace pg_auto_failover's own tuning,
which sizes shared_buffers at a quarter of the machine's memory and keeps 8 GB of WAL per node —
three such clusters on a development box would be too many.

``fast_failover`` shortens the monitor's health checks and the demotion timeouts
(`FAST_MONITOR`, `FAST_KEEPER`) so that a crashed primary is replaced in seconds instead of the
default ~50 s; the failover test uses it, ``make ha`` keeps pg_auto_failover's defaults.

    python -m jobqueue.cli.hastack start [--dir .pgdata-ha] [--port 54340] [--fast-failover]   prints the DSN
    python -m jobqueue.cli.hastack stop|state|failover [--dir .pgdata-ha]
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from jobqueue.cli.devdb import as_user, hand_over, pg_bindir, server_user

DATABASE = "jobqueue"
DEFAULT_PORT = 54340
#: What the data nodes run with instead of pg_auto_failover's machine-sized tuning (max_connections
#: as the local cluster has it: workers, the API and producers of the failover test at once).
NODE_SETTINGS = {"max_connections": "300", "shared_buffers": "'128MB'", "wal_keep_size": "'512MB'",
                 "effective_cache_size": "'1GB'", "maintenance_work_mem": "'64MB'", "work_mem": "'4MB'"}
MONITOR_SETTINGS = {"shared_buffers": "'32MB'", "effective_cache_size": "'256MB'",
                    "maintenance_work_mem": "'16MB'", "work_mem": "'4MB'"}
#: The monitor notices a dead primary in about 3 s and promotes the standby 5 s later (defaults:
#: 20 s, then 30 s). The demote timeout must stay longer than the keepers' network partition
#: timeout (`FAST_KEEPER`), after which a cut-off primary demotes itself: no two primaries. A
#: postmaster that its keeper restarts within a few seconds may still be failed over.
FAST_MONITOR = {"pgautofailover.health_check_period": "1000", "pgautofailover.health_check_timeout": "1000",
                "pgautofailover.health_check_max_retries": "2", "pgautofailover.health_check_retry_delay": "1000",
                "pgautofailover.node_considered_unhealthy_timeout": "3000",
                "pgautofailover.primary_demote_timeout": "5000", "pgautofailover.startup_grace_period": "3000"}
FAST_KEEPER = {"timeout.network_partition_timeout": "3"}
INCLUDE = "jobqueue-ha.conf"
MISSING = ("pg_autoctl is not installed: `make install` installs Debian's pg-auto-failover-cli and "
           "postgresql-15-auto-failover (Makefile target system-deps)")


class HaStackError(RuntimeError):
    """The stack could not be created, started or changed; says which step and why."""


def installed() -> bool:
    return shutil.which("pg_autoctl") is not None


@dataclass(frozen=True)
class Node:
    name: str  # "monitor", "node1", "node2" (the data nodes' names in the formation)
    pgdata: Path
    port: int


class HaStack:
    def __init__(self, root: Path | str, port: int = DEFAULT_PORT, *, fast_failover: bool = False,
                 user: str | None = None) -> None:
        if not installed():
            raise HaStackError(MISSING)
        self.root = Path(root).resolve()
        self.fast_failover = fast_failover
        self.run_as = server_user(user)
        self.pg_ctl = pg_bindir() / "pg_ctl"
        self.monitor = Node("monitor", self.root / "monitor", self._port("monitor", port))
        self.data_nodes = [Node(name, self.root / name, self._port(name, port + i))
                           for i, name in enumerate(("node1", "node2"), start=1)]
        self._env = dict(os.environ, XDG_CONFIG_HOME=str(self.root / "config"),
                         XDG_DATA_HOME=str(self.root / "share"), XDG_RUNTIME_DIR=str(self.root / "run"))

    @property
    def nodes(self) -> list[Node]:
        return [self.monitor, *self.data_nodes]

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    # --- where pg_autoctl keeps things ---------------------------------------------------------

    def _xdg(self, kind: str, node_name: str, filename: str) -> Path:
        return self.root / kind / f"pg_autoctl{self.root / node_name}" / filename

    def _port(self, name: str, default: int) -> int:
        """The port a created node has (its pg_autoctl.cfg), so a later start never lies about it."""
        config = self._xdg("config", name, "pg_autoctl.cfg")
        if config.exists():
            for line in config.read_text().splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "port":
                    return int(value)
        return default

    def created(self, node: Node) -> bool:
        """Registered for good: pg_autoctl removes its ``.init`` file once a create completed."""
        return (self._xdg("config", node.name, "pg_autoctl.cfg").exists()
                and not self._xdg("share", node.name, "pg_autoctl.init").exists())

    def supervisor_pid(self, node: Node) -> int | None:
        """The ``pg_autoctl run`` process of ``node`` when it is alive."""
        try:
            pid = int(self._xdg("run", node.name, "pg_autoctl.pid").read_text().split()[0])
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError, IndexError):
            return None

    def postmaster_pid(self, node: Node) -> int | None:
        try:
            return int((node.pgdata / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    # --- commands ------------------------------------------------------------------------------

    def autoctl(self, *args: str, timeout: float = 120.0) -> str:
        """``pg_autoctl args`` as the server user; its stdout, or HaStackError with its last words."""
        try:
            done = subprocess.run(as_user(self.run_as, ["pg_autoctl", *args]), env=self._env, capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise HaStackError(f"pg_autoctl {' '.join(args)}: no answer within {timeout:.0f} s") from None
        if done.returncode != 0:
            tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            raise HaStackError(f"pg_autoctl {' '.join(args)} failed ({done.returncode}): {tail}")
        return done.stdout

    def _common(self, node: Node) -> list[str]:
        return ["--pgdata", str(node.pgdata), "--pgport", str(node.port), "--hostname", "127.0.0.1",
                "--auth", "trust", "--no-ssl", "--pgctl", str(self.pg_ctl)]

    def _create(self, node: Node) -> None:
        if node is self.monitor:
            self.autoctl("create", "monitor", *self._common(node))
            self.autoctl("config", "set", "--pgdata", str(node.pgdata), "postgresql.listen_addresses", "127.0.0.1")
        else:
            self.autoctl("create", "postgres", *self._common(node), "--listen", "127.0.0.1", "--name", node.name,
                         "--dbname", DATABASE, "--monitor", self.monitor_uri(), timeout=300)

    def monitor_uri(self) -> str:
        return f"postgres://autoctl_node@127.0.0.1:{self.monitor.port}/pg_auto_failover?sslmode=disable"

    def _configure(self, node: Node) -> None:
        """Our settings, in a file of our own included last from postgresql.conf (so they win)."""
        if node is self.monitor:
            settings = MONITOR_SETTINGS | (FAST_MONITOR if self.fast_failover else {})
        else:
            settings = NODE_SETTINGS
        include = node.pgdata / INCLUDE
        include.write_text("# written by jobqueue.cli.hastack on every start\n"
                           + "".join(f"{key} = {value}\n" for key, value in settings.items()))
        conf = node.pgdata / "postgresql.conf"
        if f"include_if_exists = '{INCLUDE}'" not in conf.read_text():
            with conf.open("a") as out:
                out.write(f"\ninclude_if_exists = '{INCLUDE}'\n")
        if self.run_as:
            entry = pwd.getpwnam(self.run_as)
            os.chown(include, entry.pw_uid, entry.pw_gid)
        if node is not self.monitor and self.fast_failover:
            for key, value in FAST_KEEPER.items():
                self.autoctl("config", "set", "--pgdata", str(node.pgdata), key, value)

    def run(self, node: Node) -> None:
        """Start ``pg_autoctl run`` for ``node`` in a session of its own (it outlives us, and a
        crash can kill it with everything it started), logging to ``<dir>/<node>.log``."""
        if self.supervisor_pid(node):
            return
        user = group = None
        if self.run_as:  # its own uid directly: a runuser wrapper would stand between us and it
            entry = pwd.getpwnam(self.run_as)
            user, group = entry.pw_uid, entry.pw_gid
        with open(self.root / f"{node.name}.log", "a") as log:
            subprocess.Popen(["pg_autoctl", "run", "--pgdata", str(node.pgdata)], env=self._env, stdout=log,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                             cwd=self.root, user=user, group=group, extra_groups=[] if user is not None else None)
        self._wait(lambda: self.supervisor_pid(node) is not None, 30, f"pg_autoctl run for {node.name}")

    def _wait(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise HaStackError(f"{what}: not done after {timeout:.0f} s (logs: {self.root}/*.log)")
            time.sleep(0.2)

    def _accepts(self, port: int, dbname: str) -> bool:
        try:
            with psycopg.connect(host="127.0.0.1", port=port, dbname=dbname, user=self.user, connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    @property
    def user(self) -> str:
        """The clusters' superuser: initdb names it after the user running it."""
        return self.run_as or getpass.getuser()

    def state(self) -> list[dict]:
        """The monitor's view: one dict per data node (``nodename``, ``nodeport``,
        ``current_group_state``, ``assigned_group_state``, …), as ``pg_autoctl show state --json``."""
        return json.loads(self.autoctl("show", "state", "--json", "--pgdata", str(self.monitor.pgdata), timeout=30))

    def settled(self) -> bool:
        """One primary, every other data node a secondary, each where the monitor wants it and
        passing its health checks (right after a crash the states are still the old ones)."""
        try:
            nodes = self.state()
        except (HaStackError, ValueError):
            return False
        states = sorted(n["current_group_state"] for n in nodes
                        if n["current_group_state"] == n["assigned_group_state"] and n["health"] == 1)
        return states == ["primary"] + ["secondary"] * (len(self.data_nodes) - 1)

    def primary(self) -> Node:
        """The node taking writes as the monitor sees it: ``primary``, or ``wait_primary`` (a
        primary whose standby is not there yet), and the monitor wants it so — a crashed primary
        keeps reporting ``primary`` until it is back, but is assigned ``demoted``."""
        names = [n["nodename"] for n in self.state()
                 if n["current_group_state"] in ("primary", "wait_primary")
                 and n["assigned_group_state"] == n["current_group_state"]]
        if len(names) != 1:
            raise HaStackError(f"expected one primary, the monitor reports {names or 'none'}")
        return self.node(names[0])

    def start(self, timeout: float = 180.0) -> str:
        """Create what is missing, start what is stopped, wait until the formation has its primary
        and synchronous standby; the multi-host DSN. Idempotent."""
        for directory in (self.root, self.root / "run"):  # pg_autoctl falls back to /tmp without "run"
            hand_over(directory, self.run_as)
        for node in self.nodes:
            if not self.created(node):
                self._create(node)
            if not self.supervisor_pid(node):
                self._configure(node)
                self.run(node)
            port, dbname = (node.port, "pg_auto_failover") if node is self.monitor else (node.port, "postgres")
            self._wait(lambda: self._accepts(port, dbname), 60, f"{node.name} accepting connections")
        self._wait(self.settled, timeout, "a primary and a secondary")
        return self.dsn()

    def dsn(self) -> str:
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in self.data_nodes)
        return f"postgresql://{self.user}@{hosts}/{DATABASE}?target_session_attrs=read-write"

    def stop(self, timeout: float = 60.0) -> None:
        """``pg_autoctl stop`` on every node — the standby, then the primary (stopped first, the
        primary would be failed over), then the monitor; waits until each has exited."""
        try:
            primary = self.primary()
        except HaStackError:  # the monitor is down or undecided: any order
            primary = self.data_nodes[0]
        for node in [*(n for n in self.data_nodes if n != primary), primary, self.monitor]:
            if self.supervisor_pid(node):
                self.autoctl("stop", "--pgdata", str(node.pgdata), timeout=30)
        for node in self.nodes:
            self._wait(lambda: self.supervisor_pid(node) is None and not (node.pgdata / "postmaster.pid").exists(),
                       timeout, f"stopping {node.name}")

    # --- faults --------------------------------------------------------------------------------

    def perform_failover(self) -> None:
        """``pg_autoctl perform failover``: the standby is promoted, the primary demoted and
        rejoined as standby; returns once the formation has settled again."""
        self.autoctl("perform", "failover", "--pgdata", str(self.monitor.pgdata), timeout=120)

    def kill_postmaster(self, node: Node) -> int:
        """SIGKILL ``node``'s postmaster only: its keeper restarts it in place (crash recovery)."""
        pid = self.postmaster_pid(node)
        if pid is None:
            raise HaStackError(f"{node.name} has no running postmaster")
        os.kill(pid, signal.SIGKILL)
        return pid

    def crash(self, node: Node) -> None:
        """SIGKILL ``node``'s keeper and its postmaster together, as if its host died: the monitor
        has to notice and promote the standby. `run` brings it back (it rejoins as a standby)."""
        keeper, postmaster = self.supervisor_pid(node), self.postmaster_pid(node)
        if keeper is None:
            raise HaStackError(f"pg_autoctl is not running for {node.name}")
        os.killpg(os.getpgid(keeper), signal.SIGKILL)
        if postmaster is not None:
            try:
                os.kill(postmaster, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait_settled(self, timeout: float = 120.0) -> None:
        self._wait(self.settled, timeout, "a primary and a secondary")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobqueue.cli.hastack", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["start", "stop", "state", "failover"])
    parser.add_argument("--dir", default=".pgdata-ha", help="the stack's folder (default .pgdata-ha)")
    parser.add_argument("--port", type=int, default=int(os.environ.get("JOBQUEUE_HA_PORT", DEFAULT_PORT)),
                        help=f"the monitor's port; the data nodes take the next two (JOBQUEUE_HA_PORT, "
                             f"default {DEFAULT_PORT}; a created stack keeps its ports)")
    parser.add_argument("--fast-failover", action="store_true",
                        help="detect a dead primary in seconds (test settings; default: pg_auto_failover's)")
    args = parser.parse_args(argv)
    try:
        stack = HaStack(args.dir, args.port, fast_failover=args.fast_failover)
        if args.action == "start":
            print(stack.start())
        elif args.action == "stop":
            stack.stop()
        elif args.action == "state":
            print(stack.autoctl("show", "state", "--pgdata", str(stack.monitor.pgdata)), end="")
        else:
            stack.perform_failover()
            print(f"primary: {stack.primary().name}")
    except (HaStackError, OSError, KeyError) as exc:
        print(f"hastack: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
