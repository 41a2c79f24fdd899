"""The wheel is the product: built from the checkout, installed in a fresh venv outside it, it
migrates a database and runs the demo worker, and it carries no verification tooling.

The wheel is built (with build isolation: pip fetches the build requirements) from a copy of what
the sdist would hold, so the checkout gets no build/ or egg-info. The fresh venv has no system
site-packages; to save minutes of downloads, jobqueue's dependencies come from this venv's
site-packages through a .pth file, appended after the venv's own (a .pth line adds a folder to the
path without running the .pth files inside it, so this venv's editable install stays out). Every
command then runs from a folder outside the checkout, so only the installed copy can answer.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.support.workers import terminate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CHECKOUT = Path(__file__).resolve().parents[2]
#: Modules of the verification harnesses (tests/harness), which must not ship.
HARNESS = ("faults", "hastack", "devdb")


def _shipped_files() -> list[str]:
    """The files `jobqueue migrate` needs, as the wheel's data scheme lays them out."""
    wanted = [f"share/jobqueue/sql/queries/{p.name}" for p in (CHECKOUT / "sql" / "queries").glob("*.sql")]
    wanted += [f"share/jobqueue/sql/migrations/{p.name}" for p in (CHECKOUT / "sql" / "migrations").glob("*.sql")]
    wanted += [
        f"share/jobqueue/migrations/versions/{p.name}" for p in (CHECKOUT / "migrations" / "versions").glob("*.py")
    ]
    wanted += ["share/jobqueue/migrations/env.py", "share/jobqueue/migrations/script.py.mako"]
    return wanted


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(CHECKOUT / name, source / name)
    for name in ("jobqueue", "sql", "migrations"):
        shutil.copytree(CHECKOUT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    dist = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(source), "-w", str(dist)],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (found,) = dist.glob("jobqueue-*.whl")
    return found


def test_the_wheel_holds_the_sql_and_migrations_and_no_harness(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    data = {name.split(".data/data/", 1)[1] for name in names if ".data/data/" in name}
    assert sorted(set(_shipped_files()) - data) == []
    modules = [name for name in names if name.endswith(".py") and ".data/" not in name]
    assert all(name.startswith("jobqueue/") for name in modules), [m for m in modules if not m.startswith("jobqueue/")]
    assert [m for m in modules if any(part in m for part in HARNESS)] == []
    assert "jobqueue/bench/queries.sql" in names and "jobqueue/api/static/dashboard.html" in names
    assert not any(name.endswith("faults.sql") for name in names)


def test_installed_outside_the_checkout_it_migrates_and_runs_the_demo_worker(wheel, tmp_path, empty_dsn):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "jobqueue_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
        check=True,
        timeout=300,
    )

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("JOBQUEUE_", "PYTHON"))}
    env.update(JOBQUEUE_DSN=empty_dsn, PYTHONUNBUFFERED="1")

    def run(*command: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(command), cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)

    where = run(str(python), "-c", "import jobqueue.db.paths as p; print(p.__file__); print(p.resource_dir('sql'))")
    assert where.returncode == 0, where.stderr
    assert all(line.startswith(str(venv)) for line in where.stdout.split()), where.stdout  # the wheel's copy

    migrated = run(str(venv / "bin" / "jobqueue"), "migrate")
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    assert "jobqueue schema at" in migrated.stdout

    worker = subprocess.Popen(
        [str(venv / "bin" / "jobqueue-worker"), "--app", "jobqueue.demo:queue", "--no-maintenance"],
        cwd=elsewhere,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        demo = run(str(venv / "bin" / "jobqueue"), "demo", "--count", "1", "--timeout", "60")
    finally:
        log = terminate(worker)
    assert demo.returncode == 0, demo.stdout + demo.stderr + log
    assert any(" echo " in line and " completed " in line for line in demo.stdout.splitlines()), demo.stdout
