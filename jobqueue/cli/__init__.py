"""The command line: `jobqueue <command>` (jobqueue.cli.main) and `jobqueue-worker` (jobqueue.cli.worker).

Everything here is an operator's tool around the library, so the top of the `jobqueue` package holds
only the library itself. The verification harnesses (the fault campaign, the HA stack, the local
cluster helper) are not operator commands and do not ship: they live in tests/harness/.
"""

from jobqueue.cli.main import build_parser, main
from jobqueue.cli.worker import worker_main

__all__ = ["build_parser", "main", "worker_main"]
