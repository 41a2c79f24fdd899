"""`python -m tests.harness.hastack` when it cannot do what it is asked: one clear line and status 1,
never a traceback; faults aimed at a stack that is not running say so."""

from __future__ import annotations

import pytest

from tests.harness import hastack


def test_without_pg_autoctl_it_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(hastack.shutil, "which", lambda name: None)
    assert hastack.main(["start", "--dir", str(tmp_path / "ha")]) == 1
    error = capsys.readouterr().err
    assert error.startswith("hastack: pg_autoctl is not installed") and "make install" in error
    assert not (tmp_path / "ha").exists()  # nothing created


needs_autoctl = pytest.mark.skipif(not hastack.installed(), reason=hastack.MISSING)


@needs_autoctl
def test_a_failing_pg_autoctl_command_is_reported_with_its_own_words(tmp_path, capsys):
    assert hastack.main(["state", "--dir", str(tmp_path / "nothing-here")]) == 1
    error = capsys.readouterr().err
    assert error.startswith("hastack: pg_autoctl show state") and "failed" in error


@needs_autoctl
def test_faults_aimed_at_a_stack_that_is_not_running_are_refused(tmp_path):
    stack = hastack.HaStack(tmp_path / "ha", 54390)
    node = stack.data_nodes[0]
    with pytest.raises(hastack.HaStackError, match="no running postmaster"):
        stack.kill_postmaster(node)
    with pytest.raises(hastack.HaStackError, match="pg_autoctl is not running"):
        stack.crash(node)
    with pytest.raises(hastack.HaStackError, match="expected one primary|pg_autoctl show state"):
        stack.primary()
    stack.stop()  # nothing running: nothing to stop, no error


@needs_autoctl
def test_the_dsn_lists_the_three_data_nodes_and_asks_for_the_writable_one(tmp_path):
    stack = hastack.HaStack(tmp_path / "ha", 54390)
    assert stack.dsn() == (
        f"postgresql://{stack.user}@127.0.0.1:54391,127.0.0.1:54392,127.0.0.1:54393/jobqueue"
        "?target_session_attrs=read-write"
    )
    assert stack.number_sync_standbys == 1  # a commit waits for one of the two standbys


@needs_autoctl
def test_two_data_nodes_only_when_asked_and_then_no_synchronous_standby_is_required(tmp_path):
    stack = hastack.HaStack(tmp_path / "ha", 54390, data_nodes=2)
    assert [node.port for node in stack.data_nodes] == [54391, 54392]
    assert stack.number_sync_standbys == 0


def _created(stack: hastack.HaStack, name: str) -> None:
    """What pg_autoctl leaves of a created node: its configuration file, with its port."""
    config = stack.root / "config" / f"pg_autoctl{stack.root / name}" / "pg_autoctl.cfg"
    config.parent.mkdir(parents=True)
    config.write_text(f"[postgresql]\nport = {54390 + int(name[-1])}\n")


@needs_autoctl
def test_a_created_stack_keeps_its_data_nodes_and_is_never_shrunk(tmp_path):
    two = hastack.HaStack(tmp_path / "ha", 54390, data_nodes=2)
    for name in ("node1", "node2"):
        _created(two, name)
    assert len(hastack.HaStack(tmp_path / "ha", 54390).data_nodes) == 2  # as created (--two-nodes)
    assert len(hastack.HaStack(tmp_path / "ha", 54390, data_nodes=3).data_nodes) == 3  # a third is added
    _created(two, "node3")
    with pytest.raises(hastack.HaStackError, match="holds a stack of 3 data nodes"):
        hastack.HaStack(tmp_path / "ha", 54390, data_nodes=2)
    with pytest.raises(hastack.HaStackError, match="2 or 3 data nodes"):
        hastack.HaStack(tmp_path / "other", 54390, data_nodes=4)


def test_the_ports_of_a_stack_are_free_and_below_the_ephemeral_range():
    """Ports a client connection may take as its local port meanwhile cannot be listened on."""
    lowest = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    for _ in range(20):
        base = hastack.free_ports(4)
        assert 20000 <= base and base + 4 <= lowest
