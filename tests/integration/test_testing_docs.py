"""docs/testing.md's example runs as written: its Python blocks are written out as the files their
first line names (``# myapp.py``, ``# test_myapp.py``…) and pytest runs them in a process of its
own, against a migrated database named by JOBQUEUE_DSN — what a user of the page would do."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def example_files() -> dict[str, str]:
    files = {}
    for body in FENCE.findall(PAGE.read_text()):
        first = body.splitlines()[0]
        match = re.fullmatch(r"# (\w+\.py)", first)
        assert match, f"every Python block of {PAGE.name} names its file on its first line, not {first!r}"
        files[match.group(1)] = body
    return files


def test_the_pages_example_runs_as_written(dsn, tmp_path):
    files = example_files()
    assert set(files) == {"myapp.py", "test_myapp.py", "test_myapp_async.py"}
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("JOBQUEUE_")}
    environment.update(JOBQUEUE_DSN=dsn, PYTHONPATH=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error::ResourceWarning", "."],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 passed" in done.stdout, done.stdout


def test_the_middleware_example_in_the_workers_page_runs_as_written(caplog):
    """docs/workers.md's middleware block, executed as the module it says it is, wrapping a task."""
    import logging
    import types

    from jobqueue.testing import perform_job_sync

    page = PAGE.parent / "workers.md"
    block = next(body for body in FENCE.findall(page.read_text()) if "@queue.middleware" in body)
    module = types.ModuleType("myapp")
    exec(compile(block, "myapp.py", "exec"), module.__dict__)
    seen = []

    @module.queue.task("report")
    def report(job):
        seen.append(module.tenant.get())
        if job.payload.get("fail"):
            raise ValueError("no data")
        return "ok"

    with caplog.at_level(logging.INFO, logger="myapp.jobs"):
        assert perform_job_sync(module.queue, "report", {"tenant": "acme"}).ok
        assert perform_job_sync(module.queue, "report", {"tenant": "acme", "fail": True}, attempt=4).status == (
            "dead_letter"
        )
    assert seen == ["acme", "acme"] and module.tenant.get() is None
    lines = [r.getMessage() for r in caplog.records if r.name == "myapp.jobs"]
    assert lines[0].startswith("report ") and "attempt 1: completed in" in lines[0]
    assert "attempt 4: dead_letter in" in lines[1] and lines[2].startswith("gave up on ")
    assert caplog.records[-1].exc_info[1].args == ("no data",)
