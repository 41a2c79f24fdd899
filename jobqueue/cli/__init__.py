"""The command line: `jobqueue <command>` (jobqueue.cli.main) and `jobqueue-worker` (jobqueue.cli.worker).

Everything here is a tool around the library — the operator's commands, the benchmark, the fault
campaign, the local and HA development clusters — so the top of the `jobqueue` package holds only
the library itself.
"""

from jobqueue.cli.main import build_parser, main
from jobqueue.cli.worker import worker_main

__all__ = ["build_parser", "main", "worker_main"]
