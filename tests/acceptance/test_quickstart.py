"""The README's quick start, run as written: its shell lines one by one (the make target exists, the
virtual environment it names is the one that holds the commands, `jobqueue migrate` through that
environment's own console script), its `myapp.py` under a real `jobqueue-worker` started from the
folder that holds it, then its Python, SQL and REST enqueue examples — only the DSN, port and key
are this test's own. A README edit that breaks an example breaks this test."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import psycopg

from jobqueue.api.serve import wait_ready
from tests.harness.devdb import free_port
from tests.support.waiting import wait_until
from tests.support.workers import terminate

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
QUICK_START = README[README.index("## Quick start") : README.index("## Documentation")]
README_DSN = "postgresql://localhost/app"
VENV_BIN = Path(sys.executable).parent  # the tests run in the .venv the Makefile makes


def _block(language: str, containing: str) -> str:
    blocks = [
        body
        for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", QUICK_START, re.S | re.M)
        if lang == language and containing in body
    ]
    assert len(blocks) == 1, f"one {language} block with {containing!r} in the quick start"
    return blocks[0]


def _jobqueue(dsn: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from jobqueue.cli import main; sys.exit(main())", *args],
        env=dict(os.environ, JOBQUEUE_DSN=dsn),
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
    )


def _state(conn: psycopg.Connection, job_id: str) -> str:
    return conn.execute("SELECT state FROM jobqueue.jobs WHERE id = %s", (job_id,)).fetchone()[0]


def _shell_lines() -> list[str]:
    return [line.split(" #")[0].strip() for line in _block("sh", "jobqueue-worker").splitlines() if line.strip()]


def test_the_quick_starts_shell_lines_do_what_they_say(dsn, tmp_path):
    """Each line of the by-hand block is one this test knows how to check; a new kind of line fails
    here until it is checked too. (`jobqueue migrate` was `command not found`: nothing said that the
    commands live in .venv.)"""
    makefile = (ROOT / "Makefile").read_text()
    checked = []
    for line in _shell_lines():
        if line.startswith("make "):
            target = line.split()[1]
            dry = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60)
            assert dry.returncode == 0, f"{line}: {dry.stderr}"
            assert "pip install" in makefile and ".venv" in makefile
        elif line.startswith("source "):
            activate = line.split()[1]
            assert activate == ".venv/bin/activate" and "VENV := .venv" in makefile, line
            assert (VENV_BIN / "activate").exists()
            assert (VENV_BIN / "jobqueue").exists() and (VENV_BIN / "jobqueue-worker").exists()
        elif line.startswith("export JOBQUEUE_DSN="):
            assert line == f"export JOBQUEUE_DSN={README_DSN}", line  # the user's own; this test's is `dsn`
        elif line.startswith("jobqueue migrate"):
            migrated = subprocess.run(
                [str(VENV_BIN / "jobqueue"), *line.split()[1:]],
                env=dict(os.environ, JOBQUEUE_DSN=dsn, PATH=f"{VENV_BIN}:{os.environ['PATH']}"),
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert migrated.returncode == 0 and "jobqueue schema at" in migrated.stdout, migrated.stderr
        elif line.startswith("jobqueue-worker "):
            pass  # test_the_quick_start_runs_as_written runs it
        else:
            raise AssertionError(f"a quick-start line this test does not check: {line!r}")
        checked.append(line.split()[0])
    assert checked == ["make", "source", "export", "jobqueue", "jobqueue-worker"], checked


def test_make_db_prints_only_a_dsn(dsn):
    """The quick start's other way, `export JOBQUEUE_DSN=$(make -s db)`, on a fresh clone: whatever
    make installs first must say so on stderr, so that stdout is the DSN alone. The db recipe is run
    (with JOBQUEUE_DSN given it starts no cluster; -o: the install is not redone mid-suite), the
    install's progress lines are read from the Makefile."""
    assert "$(make -s db)" in _block("sh", "jobqueue-worker")
    made = subprocess.run(
        ["make", "-s", "-o", ".venv/.installed-run", "-o", "pg-server", "db"],
        cwd=ROOT,
        env=dict(os.environ, JOBQUEUE_DSN=dsn),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (made.returncode, made.stdout) == (0, dsn + "\n"), made.stderr
    makefile = (ROOT / "Makefile").read_text()
    for target in ("$(BIN)/python:", "$(RUN_STAMP):", "pg-server:"):
        recipe = makefile[makefile.index(target) :].split("\n\n")[0]
        echoes = [line for line in recipe.splitlines() if "echo " in line]
        assert echoes and all(">&2" in line for line in echoes), recipe
        assert "pip install" not in recipe or ">&2" in recipe


def test_the_quick_start_runs_as_written(dsn, conn, tmp_path):
    (tmp_path / "myapp.py").write_text(_block("python", "@queue.task"))
    worker_line = next(line for line in _shell_lines() if line.startswith("jobqueue-worker"))
    worker_args = worker_line.split()[1:]
    worker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from jobqueue.cli import worker_main; sys.exit(worker_main())",
            *worker_args,
        ],
        cwd=tmp_path,
        env=dict(os.environ, JOBQUEUE_DSN=dsn, PYTHONUNBUFFERED="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    port = free_port()
    api = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from jobqueue.cli import main; sys.exit(main())",
            "api",
            "--port",
            str(port),
        ],
        env=dict(os.environ, JOBQUEUE_DSN=dsn),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
    )
    try:
        (tmp_path / "enqueue.py").write_text(_block("python", "AsyncClient"))  # a script, as it is
        ran = subprocess.run(
            [sys.executable, "enqueue.py"],
            env=dict(os.environ, JOBQUEUE_DSN=dsn),
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip() == "{'sent': True}"

        sql = _block("sql", "jobqueue.enqueue(")
        job_id = str(conn.execute(sql).fetchone()[0])
        assert _state(conn, job_id) == "pending"  # delayed ten minutes, as written
        conn.execute("UPDATE jobqueue.jobs SET run_at = now() WHERE id = %s", (job_id,))
        wait_until(lambda: _state(conn, job_id) == "completed", timeout=30, message="the SQL example's job")

        key = _jobqueue(dsn, "apikey", "create", "--producer", "billing", cwd=tmp_path).stdout.strip()
        curl = next(line for line in _block("sh", "curl").replace("\\\n", " ").splitlines() if line.startswith("curl"))
        body = re.search(r"-d '([^']*)'", curl).group(1)
        assert wait_ready(f"http://127.0.0.1:{port}", timeout=30), "API ready"
        posted = httpx.post(
            f"http://127.0.0.1:{port}/jobs",
            content=body,
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
        assert posted.status_code == 201, posted.text
        rest_id = posted.json()["id"]
        wait_until(lambda: _state(conn, rest_id) == "completed", timeout=30, message="the REST example's job")
        listed = _jobqueue(dsn, "jobs", "list", "--json", cwd=tmp_path)  # "Look at it"
        assert listed.returncode == 0, listed.stderr
        assert {rest_id, job_id} <= set(re.findall(r"[0-9a-f]{8}-[0-9a-f-]{27}", listed.stdout))
    finally:
        worker_output = terminate(worker)
        terminate(api, timeout=20)
    assert "Traceback" not in worker_output, worker_output
