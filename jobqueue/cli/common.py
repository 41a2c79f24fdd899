"""What every command shares: Settings from the environment and --dsn, and one way to report an error."""

from __future__ import annotations

import argparse
import sys

from jobqueue.config import Settings
from jobqueue.model.errors import JobQueueError


def settings_from_args(args: argparse.Namespace) -> Settings:
    """JOBQUEUE_* settings, with the command's --dsn (when it has one) taking precedence."""
    settings = Settings.from_env()
    if getattr(args, "dsn", None):
        settings = settings.with_(dsn=args.dsn)
    return settings


def dispatch(args: argparse.Namespace) -> int:
    """Run the chosen command; a refused input or an unavailable database is one line and exit 2, not a traceback."""
    try:
        return args.func(args)
    except (JobQueueError, ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
