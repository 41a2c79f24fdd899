"""Every ```python block of README.md and docs/*.md, run as a user would copy it (tests/support/docs.py
tells the kinds apart): an app is imported as the file it names; a script is run with ``python``
against a fresh database (``JOBQUEUE_DSN``, and ``JOBQUEUE_ENCRYPTION_KEYS`` for the encryption
examples), while a real `jobqueue-worker` serves the page's app above it (the demo app that
`make run` serves, on a page without one). A ``print(...)  # what it prints`` comment is checked
against what it printed. Blocks marked not-run are reported as skipped, with their reasons."""

from __future__ import annotations

import base64
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.support import docs
from tests.support.waiting import wait_until
from tests.support.workers import terminate

PYTHON_BLOCKS = docs.blocks("python")
KEYS = "k1:" + base64.b64encode(secrets.token_bytes(32)).decode()
PRINTED = re.compile(r"^\s*print\(.*\)\s+# (.+)$", re.M)


def _env(dsn: str) -> dict[str, str]:
    return dict(os.environ, JOBQUEUE_DSN=dsn, JOBQUEUE_ENCRYPTION_KEYS=KEYS, PYTHONUNBUFFERED="1")


def _worker(app: str, folder: Path, dsn: str) -> subprocess.Popen:
    command = [sys.executable, "-c", "import sys; from jobqueue.cli import worker_main; sys.exit(worker_main())"]
    return subprocess.Popen(
        [*command, "--app", app, "--concurrency", "4"],
        cwd=folder,
        env=_env(dsn),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _serving(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM jobqueue.workers WHERE status = 'running'").fetchone()[0] > 0


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=lambda block: f"{block.where}-{block.kind}")
def test_the_python_example_runs_as_written(block, dsn, tmp_path):
    if block.kind == "not-run":
        pytest.skip(f"{block.where} is marked not-run: {block.not_run}")
    if block.kind == "app":
        (tmp_path / f"{block.file_name}.py").write_text(block.body)
        imported = subprocess.run(
            [sys.executable, "-c", f"import {block.file_name} as app; assert app.queue.tasks, 'no task'"],
            cwd=tmp_path,
            env=_env(dsn),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert imported.returncode == 0, f"{block.where}\n{imported.stderr}"
        return
    apps = docs.apps_before(block)
    for name, app in apps.items():
        (tmp_path / f"{name}.py").write_text(app.body)
    served = f"{list(apps)[-1]}:queue" if apps else "jobqueue.demo:queue"
    worker = _worker(served, tmp_path, dsn)
    try:
        wait_until(lambda: _serving(dsn) or worker.poll() is not None, timeout=30, message="the worker starts")
        assert worker.poll() is None, terminate(worker)
        (tmp_path / "example.py").write_text(block.body)
        ran = subprocess.run(
            [sys.executable, "example.py"], cwd=tmp_path, env=_env(dsn), capture_output=True, text=True, timeout=90
        )
    finally:
        worker_output = terminate(worker)
    assert ran.returncode == 0, f"{block.where} (worker on {served})\n{ran.stdout}\n{ran.stderr}\n{worker_output}"
    for expected in PRINTED.findall(block.body):
        assert expected.strip() in ran.stdout, f"{block.where}: promised {expected!r}, printed {ran.stdout!r}"
    assert "Traceback" not in worker_output, worker_output


def test_the_examples_are_mostly_run():
    """Each not-run block is a choice with its reason; this keeps the choices few and in sight."""
    kinds = [block.kind for block in PYTHON_BLOCKS]
    skipped = [f"{block.where}: {block.not_run}" for block in PYTHON_BLOCKS if block.kind == "not-run"]
    assert kinds.count("script") >= 5 and kinds.count("app") >= 4, kinds
    assert len(skipped) <= 2, "\n".join(skipped)
