"""One-shot commands start at once: what a `jobqueue` process imports before it does anything.

Asserted on the modules a real process has imported, not on time (a shared machine's timings
vary by a factor of three): `jobqueue --help` must load neither the database driver nor any
command's heavy dependencies, and each command only its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import jobqueue

#: What `jobqueue --help` has no use for: the migrations' (alembic, sqlalchemy), the REST API's
#: (litestar, uvicorn), the benchmark, and the driver and client every database command needs.
HEAVY = ("alembic", "sqlalchemy", "litestar", "uvicorn", "jobqueue.bench", "psycopg", "jobqueue.client")

# As the console script runs it; the modules are printed after a marker, below the command's own output.
PROBE = """
import json, sys
from jobqueue.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("\\n--modules--")
print(json.dumps(sorted(sys.modules)))
"""


def imported_by(*argv: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=60)
    assert "--modules--" in done.stdout, done.stdout + done.stderr
    return set(json.loads(done.stdout.rsplit("--modules--", 1)[1]))


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(name for name in names if name in modules or any(m.startswith(name + ".") for m in modules))


def test_help_imports_no_command_and_no_driver():
    modules = imported_by("--help")
    assert loaded(modules, HEAVY) == []
    assert loaded(imported_by(), HEAVY) == []  # no command: the usage line, as fast


def test_a_command_imports_its_own_module_and_not_the_others():
    jobs = imported_by("jobs", "list", "--help")
    assert "jobqueue.cli.jobs" in jobs
    assert (
        loaded(
            jobs,
            (
                "alembic",
                "sqlalchemy",
                "litestar",
                "uvicorn",
                "jobqueue.bench",
                "jobqueue.cli.schedules",
                "jobqueue.cli.admin",
            ),
        )
        == []
    )
    assert "jobqueue.client" in imported_by("queues", "list", "--help")  # the queue commands' module needs it
    migrate = imported_by("migrate", "--help")  # alembic only once it migrates
    assert loaded(migrate, ("alembic", "sqlalchemy", "litestar", "jobqueue.client")) == []
    assert "jobqueue.bench.run" in imported_by("bench", "--help")  # the probe does see what a command loads


def test_import_jobqueue_is_light_and_every_public_name_still_resolves():
    done = subprocess.run(
        [sys.executable, "-c", "import json, sys, jobqueue; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert loaded(set(json.loads(done.stdout)), HEAVY) == []
    homes = {name: module for module, names in jobqueue._HOMES.items() for name in names}
    assert sorted(homes) == sorted(jobqueue.__all__)
    for name in jobqueue.__all__:
        assert getattr(jobqueue, name) is getattr(sys.modules[homes[name]], name)
    assert set(jobqueue.__all__) <= set(dir(jobqueue))
    with pytest.raises(AttributeError):
        jobqueue.NoSuchName  # noqa: B018


def test_a_client_without_tracing_configured_does_not_load_the_tracing_sdk():
    """Every one-shot command opens a client; asking whether an SDK provider is installed must not
    import the SDK (~40 ms) to find out that none is."""
    code = (
        "import sys; from jobqueue import Client, Settings; from jobqueue.config import DbSettings; "
        "Client(settings=Settings(db=DbSettings(dsn='postgresql://x/y')))\n"
        "print('opentelemetry.sdk.trace' in sys.modules)"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.stdout.strip() == "False", done.stdout + done.stderr
