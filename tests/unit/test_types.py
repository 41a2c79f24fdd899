"""The package is typed (it ships py.typed): mypy, configured in pyproject.toml, finds nothing."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_package_type_checks():
    checked = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert (ROOT / "jobqueue" / "py.typed").exists()
