"""The local cluster's port (tests.harness.devdb): `make run` on a machine where another checkout's
cluster holds 54329 starts on a free port instead of failing, and a cluster already running keeps
the port it listens on, so the DSN printed is the one that works."""

from __future__ import annotations

import socket

from tests.harness import devdb


def test_a_taken_default_port_gives_way_to_a_free_one(monkeypatch, capsys):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        monkeypatch.setattr(devdb, "DEFAULT_PORT", taken)
        chosen = devdb.start_port(None)
        assert chosen != taken and not devdb.port_in_use(chosen)
        assert f"port {taken} is taken" in capsys.readouterr().err
        assert devdb.start_port(taken) == taken  # asked for by name: kept, and the start says why it fails


def test_a_free_default_port_is_the_default(monkeypatch):
    free = devdb.free_port()
    monkeypatch.setattr(devdb, "DEFAULT_PORT", free)
    assert devdb.start_port(None) == free


def test_a_running_cluster_is_found_on_the_port_it_listens_on(tmp_path, monkeypatch):
    monkeypatch.setattr(devdb, "pg_bindir", lambda: tmp_path)
    cluster = devdb.LocalCluster(tmp_path, 54329)
    assert cluster.listening_port() is None
    # postmaster.pid: pid, data directory, start time, port, socket directory, …
    (tmp_path / "postmaster.pid").write_text(f"4242\n{tmp_path}\n1764650000\n61234\n{tmp_path}\n127.0.0.1\n")
    assert cluster.listening_port() == 61234


def test_a_port_in_the_environment_must_be_a_port(monkeypatch):
    monkeypatch.setenv("JOBQUEUE_DEV_PORT", "54330")
    assert devdb.env_port() == 54330
    for bad in ("abc", "0", "70000", "-1"):
        monkeypatch.setenv("JOBQUEUE_DEV_PORT", bad)
        try:
            devdb.env_port()
        except SystemExit as exc:
            assert "JOBQUEUE_DEV_PORT must be a port number" in str(exc)
        else:
            raise AssertionError(f"{bad!r} accepted")
