"""A pg_auto_failover stack on one machine: `make ha`, `make ha-stop` and the failover test.

Local PostgreSQL clusters under one folder (default ``.pgdata-ha``), each run by its own
``pg_autoctl run`` supervisor: a *monitor* (port P) that holds the formation's state and decides
failovers, and the *data nodes* (ports P+1, P+2, P+3): a primary and two standbys. Clients find the
primary themselves with the multi-host DSN (`HaStack.dsn`, ``target_session_attrs=read-write``).

The default is the zero-loss topology: three data nodes and ``number_sync_standbys = 1``, so
``synchronous_standby_names = 'ANY 1 (standby_2, standby_3)'`` and a commit is acknowledged once the
primary and one standby have flushed it. One standby may be down or rejoining without that
changing; with both down, writes wait until one is back. ``data_nodes=2`` (``--two-nodes``) is an
opt-in trade of durability for availability: pg_auto_failover cannot ask for one standby out of
one (``number_sync_standbys`` stays 0), so whenever that standby is away the primary goes on alone
(``wait_primary``) and what it acknowledges then lives on it only until the standby catches up.
docs/high-availability.md has the table of what "accepted" means in each state of each topology.

pg_autoctl keeps its configuration, state and pid files under the folder too (the ``XDG_*``
directories it honours), so nothing outside it is touched. As root, everything runs as the
unprivileged user `tests.harness.devdb.server_user` names; everything listens on 127.0.0.1 only, without
TLS and with ``trust`` authentication (loopback only: docs/high-availability.md says what
production uses instead). The settings in `NODE_SETTINGS` replace pg_auto_failover's own tuning,
which sizes shared_buffers at a quarter of the machine's memory and keeps 8 GB of WAL per node —
four such clusters on a development box would be too many. Each node's server log is kept outside
its data directory, in ``<dir>/logs/<node>.postgres.log`` (`_keep_log_outside`): a rejoining node's
pg_rewind replaces what the data directory holds with the new primary's files.

``fast_failover`` shortens the monitor's health checks and the demotion timeouts
(`FAST_MONITOR`, `FAST_KEEPER`) so that a crashed primary is replaced in seconds instead of the
default ~50 s; the failover test uses it, ``make ha`` keeps pg_auto_failover's defaults.

    python -m tests.harness.hastack start [--dir .pgdata-ha] [--port 54340] [--fast-failover] [--two-nodes]
    python -m tests.harness.hastack stop|state|events|failover [--dir .pgdata-ha]
    python -m tests.harness.hastack replace --node NAME [--dir .pgdata-ha]   drop a node, create it anew
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psycopg

from tests.harness.devdb import as_user, hand_over, pg_bindir, server_user

DATABASE = "jobqueue"
DEFAULT_PORT = 54340
#: The zero-loss topology: a primary and two standbys, a commit waiting for one of them.
DATA_NODES = 3
#: What the data nodes run with instead of pg_auto_failover's machine-sized tuning (max_connections
#: as the local cluster has it: workers, the API and producers of the failover test at once). The
#: log goes to the server's stderr, which pg_autoctl writes to ``startup.log``: see `_keep_log_outside`.
NODE_SETTINGS = {
    "max_connections": "300",
    "shared_buffers": "'128MB'",
    "wal_keep_size": "'512MB'",
    "effective_cache_size": "'1GB'",
    "maintenance_work_mem": "'64MB'",
    "work_mem": "'4MB'",
    "logging_collector": "off",
    "log_line_prefix": "'%m [%p] %q%a '",
}
#: A standby rejoining (catchingup) counts as caught up, becomes a secondary and a candidate for
#: promotion, once its WAL is within this many bytes of what the primary last reported (default
#: 16 MB). With two data nodes, acknowledged WAL that far behind could be missing from it when the
#: primary dies; while it is catching up the monitor promotes nothing. 4 MB, not less: the primary
#: reports once a second, and the failover test writes up to ~5 MB of WAL a second, so a lower bar
#: keeps a healthy standby catching up for many reports. The promotion bar
#: (pgautofailover.promote_wal_log_threshold) keeps its 16 MB: the monitor compares the absolute
#: difference with a dead primary's last report, which a standby that received the primary's last
#: second of WAL is ahead of, and a lower bar would refuse such a failover for good.
CATCHUP_WAL_BYTES = 4 * 1024 * 1024
MONITOR_SETTINGS = {
    "logging_collector": "off",
    "shared_buffers": "'32MB'",
    "effective_cache_size": "'256MB'",
    "maintenance_work_mem": "'16MB'",
    "work_mem": "'4MB'",
    "pgautofailover.enable_sync_wal_log_threshold": str(CATCHUP_WAL_BYTES),
}
#: The monitor declares a primary dead once its keeper has been silent for 6 s and its health
#: checks (2 s each) fail, and promotes a standby 5 s later (defaults: 20 s, then 30 s). Not
#: shorter: on a machine kept busy (the failover test under four CPU-bound loops) a live keeper's
#: report can take seconds, and a primary declared dead that is not is a needless switch. The
#: demote timeout must stay longer than the keepers' network partition timeout (`FAST_KEEPER`),
#: after which a cut-off primary demotes itself: no two primaries. A postmaster that dies is
#: restarted in place by its keeper, which meanwhile reports it running (pg_autoctl's
#: postgresql_restart_failure_timeout, 20 s): no failover.
FAST_MONITOR = {
    "pgautofailover.health_check_period": "1000",
    "pgautofailover.health_check_timeout": "2000",
    "pgautofailover.health_check_max_retries": "2",
    "pgautofailover.health_check_retry_delay": "1000",
    "pgautofailover.node_considered_unhealthy_timeout": "6000",
    "pgautofailover.primary_demote_timeout": "5000",
    "pgautofailover.startup_grace_period": "3000",
}
FAST_KEEPER = {"timeout.network_partition_timeout": "3"}
#: The states of a node that takes writes (pg_auto_failover's primary states).
WRITABLE = ("primary", "wait_primary", "join_primary", "apply_settings")
INCLUDE = "jobqueue-ha.conf"
MISSING = (
    "pg_autoctl is not installed: `make install` installs Debian's pg-auto-failover-cli and "
    "postgresql-15-auto-failover (Makefile target system-deps)"
)


def free_ports(count: int, *, lowest: int = 20000) -> int:
    """A port P with P..P+count-1 all free, below the kernel's ephemeral range. A stack binds its
    ports one node at a time, tens of seconds apart on a busy machine, and a port of the ephemeral
    range that was free when chosen may meanwhile be any client connection's local port: Linux
    then refuses to listen on it (EADDRINUSE, even with SO_REUSEADDR), and the node's PostgreSQL
    cannot start (seen: a create that failed after 60 s, a standby cloned over and over). Ports
    below the range are never handed out to clients."""
    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    rng = random.Random()
    for _ in range(1000):
        base = rng.randrange(lowest, ephemeral - count)
        try:
            for port in range(base, base + count):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise HaStackError(f"no {count} consecutive free ports between {lowest} and {ephemeral}")


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
    def __init__(
        self,
        root: Path | str,
        port: int = DEFAULT_PORT,
        *,
        fast_failover: bool = False,
        data_nodes: int | None = None,
        user: str | None = None,
    ) -> None:
        if not installed():
            raise HaStackError(MISSING)
        self.root = Path(root).resolve()
        self.fast_failover = fast_failover
        self.run_as = server_user(user)
        self.pg_ctl = pg_bindir() / "pg_ctl"
        self._env = dict(
            os.environ,
            XDG_CONFIG_HOME=str(self.root / "config"),
            XDG_DATA_HOME=str(self.root / "share"),
            XDG_RUNTIME_DIR=str(self.root / "run"),
        )
        self.monitor = Node("monitor", self.root / "monitor", self._port("monitor", port))
        count = self._data_node_count(data_nodes)
        self.data_nodes = [
            Node(f"node{i}", self.root / f"node{i}", self._port(f"node{i}", port + i)) for i in range(1, count + 1)
        ]

    def _data_node_count(self, wanted: int | None) -> int:
        """``wanted`` data nodes, or (None) as many as the folder's stack has, else `DATA_NODES`. A
        two-node stack can be given its third node; a stack is never shrunk."""
        existing = sum(1 for i in range(1, 10) if self._xdg("config", f"node{i}", "pg_autoctl.cfg").exists())
        if wanted is None:
            return existing or DATA_NODES
        if wanted not in (2, 3):
            raise HaStackError(f"a stack has 2 or 3 data nodes, not {wanted}")
        if existing > wanted:
            raise HaStackError(
                f"{self.root} holds a stack of {existing} data nodes: stop it and remove the folder "
                f"to make one of {wanted}"
            )
        return wanted

    @property
    def number_sync_standbys(self) -> int:
        """What the formation asks of a commit: 1 standby with three data nodes; 0 with two, where
        pg_auto_failover lets the primary go on alone (wait_primary) whenever its standby is away."""
        return 1 if len(self.data_nodes) >= 3 else 0

    @property
    def nodes(self) -> list[Node]:
        return [self.monitor, *self.data_nodes]

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise HaStackError(f"no node {name!r} (the stack has {', '.join(n.name for n in self.nodes)})")

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
        return (
            self._xdg("config", node.name, "pg_autoctl.cfg").exists()
            and not self._xdg("share", node.name, "pg_autoctl.init").exists()
        )

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
            done = subprocess.run(
                as_user(self.run_as, ["pg_autoctl", *args]),
                env=self._env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise HaStackError(f"pg_autoctl {' '.join(args)}: no answer within {timeout:.0f} s") from None
        if done.returncode != 0:
            failures = self.root / "pg_autoctl-failures.log"  # the whole story, beside the nodes' logs
            if self.root.is_dir():
                with failures.open("a") as out:
                    out.write(
                        f"--- {time.strftime('%H:%M:%S')} pg_autoctl {' '.join(args)} -> {done.returncode}\n"
                        f"{done.stdout}{done.stderr}\n"
                    )
            tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            raise HaStackError(
                f"pg_autoctl {' '.join(args)} failed ({done.returncode}): {tail} (all of it: {failures})"
            )
        return done.stdout

    def _common(self, node: Node) -> list[str]:
        return [
            "--pgdata",
            str(node.pgdata),
            "--pgport",
            str(node.port),
            "--hostname",
            "127.0.0.1",
            "--auth",
            "trust",
            "--no-ssl",
            "--pgctl",
            str(self.pg_ctl),
        ]

    def _create(self, node: Node) -> None:
        if node is self.monitor:
            self.autoctl("create", "monitor", *self._common(node))
            self.autoctl("config", "set", "--pgdata", str(node.pgdata), "postgresql.listen_addresses", "127.0.0.1")
        else:
            self.autoctl(
                "create",
                "postgres",
                *self._common(node),
                "--listen",
                "127.0.0.1",
                "--name",
                node.name,
                "--dbname",
                DATABASE,
                "--monitor",
                self.monitor_uri(),
                timeout=300,
            )

    def monitor_uri(self) -> str:
        return f"postgres://autoctl_node@127.0.0.1:{self.monitor.port}/pg_auto_failover?sslmode=disable"

    def _configure(self, node: Node) -> None:
        """Our settings, in a file of our own included last from postgresql.conf (so they win)."""
        if node is self.monitor:
            settings = MONITOR_SETTINGS | (FAST_MONITOR if self.fast_failover else {})
        else:
            settings = NODE_SETTINGS
        include = node.pgdata / INCLUDE
        include.write_text(
            "# written by tests.harness.hastack on every start\n"
            + "".join(f"{key} = {value}\n" for key, value in settings.items())
        )
        conf = node.pgdata / "postgresql.conf"
        if f"include_if_exists = '{INCLUDE}'" not in conf.read_text():
            with conf.open("a") as out:
                out.write(f"\ninclude_if_exists = '{INCLUDE}'\n")
        self._give(include)
        self._keep_log_outside(node)
        if node is not self.monitor and self.fast_failover:
            for key, value in FAST_KEEPER.items():
                self.autoctl("config", "set", "--pgdata", str(node.pgdata), key, value)

    def _give(self, path: Path) -> None:
        """Make ``path`` (a file or a symlink we created) the server user's."""
        if self.run_as:
            entry = pwd.getpwnam(self.run_as)
            os.chown(path, entry.pw_uid, entry.pw_gid, follow_symlinks=False)

    def server_log(self, node: Node) -> Path:
        return self.root / "logs" / f"{node.name}.postgres.log"

    def _keep_log_outside(self, node: Node) -> None:
        """The server writes its log to stderr, which pg_autoctl sends to ``<pgdata>/startup.log``;
        that name becomes a symlink to `server_log`, outside the data directory. pg_rewind copies
        a rejoining node's data directory from the new primary but leaves a symlink that both
        have alone, and pg_basebackup skips it (a special file: the new node starts with a
        startup.log of its own, made a symlink here before it first runs under `run`). What a
        regular startup.log held is appended first."""
        target = self.server_log(node)
        hand_over(target.parent, self.run_as)
        link = node.pgdata / "startup.log"
        if link.is_symlink() and Path(os.readlink(link)) == target:
            return
        if link.exists() and not link.is_symlink():
            with target.open("ab") as out:
                out.write(link.read_bytes())
        target.touch()
        self._give(target)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)
        self._give(link)

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
            subprocess.Popen(
                ["pg_autoctl", "run", "--pgdata", str(node.pgdata)],
                env=self._env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.root,
                user=user,
                group=group,
                extra_groups=[] if user is not None else None,
            )
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
        states = sorted(
            n["current_group_state"]
            for n in nodes
            if n["current_group_state"] == n["assigned_group_state"] and n["health"] == 1
        )
        return states == ["primary"] + ["secondary"] * (len(self.data_nodes) - 1)

    def primary(self) -> Node:
        """The node taking writes as the monitor sees it: ``primary``, or ``wait_primary`` (a
        primary whose standby is not there yet), and the monitor keeps it one (a wait_primary
        assigned primary, a primary assigned apply_settings or join_primary) — a crashed primary
        keeps reporting ``primary`` until it is back, but is assigned ``draining`` or ``demoted``."""
        names = [
            n["nodename"]
            for n in self.state()
            if n["current_group_state"] in WRITABLE and n["assigned_group_state"] in WRITABLE
        ]
        if len(names) != 1:
            raise HaStackError(f"expected one primary, the monitor reports {names or 'none'}")
        return self.node(names[0])

    def start(self, timeout: float = 180.0) -> str:
        """Create what is missing, start what is stopped, wait until the formation has its primary
        and secondaries and asks for `number_sync_standbys`; the multi-host DSN. Idempotent (a
        two-node stack started with three data nodes gets its third)."""
        for directory in (self.root, self.root / "run"):  # pg_autoctl falls back to /tmp without "run"
            hand_over(directory, self.run_as)
        self._bring_up(self.monitor)
        self._bring_up(self.data_nodes[0])
        with ThreadPoolExecutor(len(self.data_nodes) - 1) as pool:  # the standbys clone it side by side
            list(pool.map(self._bring_up, self.data_nodes[1:]))
        self._wait(self.settled, timeout, "a primary and its secondaries")
        self._ensure_sync_standbys()
        self._wait(self.settled, timeout, "a primary and its secondaries")
        return self.dsn()

    def _bring_up(self, node: Node) -> None:
        """Create ``node`` if it is not, run it if it is not running, until it takes connections."""
        if not self.created(node):
            self._create(node)
        if not self.supervisor_pid(node):
            self._configure(node)
            self.run(node)
        port, dbname = (node.port, "pg_auto_failover") if node is self.monitor else (node.port, "postgres")
        self._wait(lambda: self._accepts(port, dbname), 60, f"{node.name} accepting connections")

    def _ensure_sync_standbys(self) -> None:
        """pg_auto_failover sets the formation to 1 itself when a second standby joins; a stack
        whose setting was changed by hand is set back (the primary applies it, then settles)."""
        monitor = str(self.monitor.pgdata)
        current = self.autoctl("get", "formation", "number-sync-standbys", "--pgdata", monitor, timeout=30)
        if int(current.strip()) != self.number_sync_standbys:
            self.autoctl(
                "set",
                "formation",
                "number-sync-standbys",
                str(self.number_sync_standbys),
                "--pgdata",
                monitor,
                timeout=60,
            )

    def events(self, count: int = 1000) -> list[dict]:
        """The monitor's last ``count`` events, oldest first (``pg_autoctl show events --json``):
        every state a node was assigned or reported, with the monitor's reason."""
        return json.loads(
            self.autoctl(
                "show", "events", "--count", str(count), "--json", "--pgdata", str(self.monitor.pgdata), timeout=30
            )
        )

    def dsn(self) -> str:
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in self.data_nodes)
        return f"postgresql://{self.user}@{hosts}/{DATABASE}?target_session_attrs=read-write"

    def stop(self, timeout: float = 60.0, *, immediate: bool = False) -> None:
        """``pg_autoctl stop`` on every node — the standbys, then the primary (stopped first, the
        primary would be failed over), then the monitor; waits until each has exited.
        ``immediate``: every data node at once, ``--immediate`` (a stack about to be removed)."""
        if immediate:
            for node in self.data_nodes:
                if self.supervisor_pid(node):
                    self.autoctl("stop", "--immediate", "--pgdata", str(node.pgdata), timeout=30)
            for node in self.data_nodes:  # one busy with a rewind or a copy may not listen: killed
                try:
                    self._wait(lambda: self.supervisor_pid(node) is None, 20, f"stopping {node.name}")
                except HaStackError:
                    if self.supervisor_pid(node):
                        self.crash(node)
            order = [self.monitor]
        else:
            try:
                primary = self.primary()
            except HaStackError:  # the monitor is down or undecided: any order
                primary = self.data_nodes[0]
            order = [*(n for n in self.data_nodes if n != primary), primary, self.monitor]
        for node in order:
            if self.supervisor_pid(node):
                self.autoctl("stop", "--pgdata", str(node.pgdata), timeout=30)
        for node in self.nodes:
            self._wait(
                lambda: self.supervisor_pid(node) is None and not self._postmaster_alive(node),
                timeout,
                f"stopping {node.name}",
            )

    def _postmaster_alive(self, node: Node) -> bool:
        """A postmaster runs for ``node`` (a pid file a killed one left behind does not count)."""
        pid = self.postmaster_pid(node)
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # alive, as another user
            pass
        return True

    # --- faults --------------------------------------------------------------------------------

    def perform_failover(self) -> None:
        """``pg_autoctl perform failover``: a standby is promoted, the primary demoted and
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

    def replace(self, node: Node) -> None:
        """Drop ``node`` from the formation and create it anew as a standby (a fresh copy of the
        primary). The way out when a failover hangs with ``node`` — an old primary whose keeper
        lived — assigned ``fast_forward`` from itself (pg_auto_failover 2.0, upstream issue 1060,
        fixed in PR 1143): dropped, it stops being the candidate, the monitor promotes one of the
        others, and the new copy rejoins. What only ``node`` had is gone with it: WAL no standby
        confirmed, so no acknowledged commit."""
        if node is self.monitor:
            raise HaStackError("the monitor cannot be replaced this way")
        if self.supervisor_pid(node):
            self.autoctl("stop", "--immediate", "--pgdata", str(node.pgdata), timeout=30)
            self._wait(lambda: self.supervisor_pid(node) is None, 30, f"stopping {node.name}")
        if any(n["nodename"] == node.name for n in self.state()):
            self.autoctl("drop", "node", "--monitor", self.monitor_uri(), "--name", node.name, "--force", timeout=90)
        for path in [
            node.pgdata,
            *(self._xdg(kind, node.name, "pg_autoctl.cfg").parent for kind in ("config", "share", "run")),
        ]:
            shutil.rmtree(path, ignore_errors=True)
        self.start()

    def wait_settled(self, timeout: float = 120.0) -> None:
        self._wait(self.settled, timeout, "a primary and its secondaries")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.hastack", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["start", "stop", "state", "events", "failover", "replace"])
    parser.add_argument("--dir", default=".pgdata-ha", help="the stack's folder (default .pgdata-ha)")
    parser.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("JOBQUEUE_HA_PORT", DEFAULT_PORT)),
        help=f"the monitor's port; the data nodes take the next ones (JOBQUEUE_HA_PORT, "
        f"default {DEFAULT_PORT}; a created stack keeps its ports)",
    )
    parser.add_argument(
        "--fast-failover",
        action="store_true",
        help="detect a dead primary in seconds (test settings; default: pg_auto_failover's)",
    )
    parser.add_argument("--node", help="replace: the data node to drop and create anew (node1, node2, node3)")
    parser.add_argument(
        "--two-nodes",
        action="store_true",
        help="create two data nodes instead of three: writes go on while the one standby is "
        "away, acknowledged by the primary alone (docs/high-availability.md)",
    )
    args = parser.parse_args(argv)
    try:
        stack = HaStack(args.dir, args.port, fast_failover=args.fast_failover, data_nodes=2 if args.two_nodes else None)
        if args.action == "start":
            print(stack.start())
            if len(stack.data_nodes) == 2:
                print(
                    f"hastack: {stack.root} has two data nodes: while its standby is away the primary acknowledges "
                    "writes alone (docs/high-availability.md); remove the folder for the three-node stack",
                    file=sys.stderr,
                )
        elif args.action == "stop":
            stack.stop()
        elif args.action == "state":
            print(stack.autoctl("show", "state", "--pgdata", str(stack.monitor.pgdata)), end="")
        elif args.action == "replace":
            if not args.node:
                parser.error("replace needs --node")
            stack.replace(stack.node(args.node))
            print(f"primary: {stack.primary().name}")
        elif args.action == "events":
            print(stack.autoctl("show", "events", "--count", "50", "--pgdata", str(stack.monitor.pgdata)), end="")
        else:
            stack.perform_failover()
            print(f"primary: {stack.primary().name}")
    except (HaStackError, OSError, KeyError) as exc:
        print(f"hastack: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
