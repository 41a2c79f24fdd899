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
