"""A real streaming standby that the primary waits for, and a way to stop it from confirming.

`SyncStandby` clones a throwaway primary with ``pg_basebackup``, starts the copy as a hot standby
and names it in the primary's ``synchronous_standby_names``, so every commit that writes WAL waits
until the standby has flushed it (``synchronous_commit = on`` for the primary's login role: the
throwaway clusters run with it off). `SyncStandby.frozen` SIGSTOPs the standby's WAL receiver — the
one process that confirms — so that such a commit blocks for as long as the freeze lasts, exactly
as it does while a synchronous standby is unreachable, and SIGCONTs it afterwards. Only processes
this module started are ever signalled (the receiver's pid comes from the standby itself).
"""

from __future__ import annotations

import os
import signal
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psycopg

from tests.harness.devdb import LocalCluster, as_user, free_port, hand_over
from tests.support.waiting import wait_until

NAME = "jqstandby"


class SyncStandby:
    def __init__(self, primary: LocalCluster, datadir: Path) -> None:
        self.primary = primary
        self.cluster = LocalCluster(datadir, free_port(), fast=True)

    def start(self) -> "SyncStandby":
        datadir = self.cluster.datadir
        hand_over(datadir, self.cluster.run_as)
        os.chmod(datadir, 0o700)
        subprocess.run(
            as_user(
                self.cluster.run_as,
                [
                    str(self.cluster.bindir / "pg_basebackup"),
                    "-D",
                    str(datadir),
                    "-R",
                    "-X",
                    "stream",
                    "-c",
                    "fast",
                    "-d",
                    f"host=127.0.0.1 port={self.primary.port} user=postgres application_name={NAME}",
                ],
            ),
            check=True,
            capture_output=True,
        )
        self.cluster.start()
        with psycopg.connect(self.primary.dsn(), autocommit=True) as conn:
            conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{NAME}'")
            conn.execute("ALTER ROLE postgres SET synchronous_commit = on")
            conn.execute("SELECT pg_reload_conf()")
            wait_until(
                lambda: (
                    conn.execute(
                        "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s", (NAME,)
                    ).fetchone()
                    == ("sync",)
                ),
                timeout=30,
                message="the standby to be synchronous",
            )
        return self

    def stop(self) -> None:
        with psycopg.connect(self.primary.dsn(), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
            conn.execute("SELECT pg_reload_conf()")
        self.cluster.stop(mode="immediate")

    def receiver_pid(self) -> int:
        with psycopg.connect(self.cluster.dsn(), autocommit=True) as conn:
            row = conn.execute("SELECT pid FROM pg_stat_wal_receiver WHERE status = 'streaming'").fetchone()
        assert row, "the standby is not streaming"
        return row[0]

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """The standby receives nothing and confirms nothing until the block ends."""
        pid = self.receiver_pid()
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)
