"""What every command shares: Settings from the environment and --dsn, and one way to report an error.

Imported by `jobqueue --help` too, so it imports nothing heavy (jobqueue.config brings psycopg)
until a command asks for its settings.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from jobqueue.model.errors import JobQueueError

if TYPE_CHECKING:
    from jobqueue.config import Settings


def settings_from_args(args: argparse.Namespace) -> Settings:
    """JOBQUEUE_* settings, with the command's --dsn (when it has one) taking precedence."""
    from jobqueue.config import Settings

    settings = Settings.from_env()
    if getattr(args, "dsn", None):
        settings = settings.with_(db=settings.db.with_(dsn=args.dsn))
    return settings


def dispatch(args: argparse.Namespace) -> int:
    """Run the chosen command; a refused input or an unavailable database is one line and exit 2, not a traceback."""
    try:
        return args.func(args)
    except (JobQueueError, ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
