"""`python -m jobqueue.cli.hastack` when it cannot do what it is asked: one clear line and status 1,
never a traceback; faults aimed at a stack that is not running say so."""

from __future__ import annotations

import pytest

from jobqueue.cli import hastack


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
def test_the_dsn_lists_both_data_nodes_and_asks_for_the_writable_one(tmp_path):
    stack = hastack.HaStack(tmp_path / "ha", 54390)
    assert stack.dsn() == (f"postgresql://{stack.user}@127.0.0.1:54391,127.0.0.1:54392/jobqueue"
                           "?target_session_attrs=read-write")
