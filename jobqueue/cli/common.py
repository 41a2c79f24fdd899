"""What every command shares: Settings from the environment and --dsn, and one way to end.

Imported by `jobqueue --help` too, so it imports nothing heavy (jobqueue.config brings psycopg)
until a command asks for its settings.

How a command ends, whatever it is (`run_command`, `dispatch`), so that no operator meets a
traceback for something that is not a bug:

- a refused input, an unavailable database or an error the database raised: ``error: …`` on one
  line (the server's message and hint, never its PL/pgSQL CONTEXT lines), exit 2;
- Ctrl-C: ``interrupted``, exit 130 (128 + SIGINT, as a shell reports it);
- stdout closed early (``jobqueue jobs list --json | head``): nothing more is written, exit 141
  (128 + SIGPIPE, what a tool killed by the signal reports).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Callable

from jobqueue.model.errors import JobQueueError

if TYPE_CHECKING:
    from jobqueue.config import Settings

INTERRUPTED = 130
PIPE_CLOSED = 141


def settings_from_args(args: argparse.Namespace) -> Settings:
    """JOBQUEUE_* settings, with the command's --dsn (when it has one) taking precedence."""
    from jobqueue.config import Settings

    settings = Settings.from_env()
    if getattr(args, "dsn", None):
        settings = settings.with_(db=settings.db.with_(dsn=args.dsn))
    return settings


def dispatch(args: argparse.Namespace) -> int:
    """Run the chosen command; a refused input, an unavailable database or an error the database
    raised is one line and exit 2, not a traceback."""
    try:
        return args.func(args)
    except (JobQueueError, ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        message = sql_error_message(exc)
        if message is None:
            raise  # a bug: its traceback is what a report needs
        print(f"error: {message}", file=sys.stderr)
        return 2


def sql_error_message(exc: BaseException) -> str | None:
    """The one-line description of the database error behind ``exc`` (psycopg's own, or the one an
    SQLAlchemy error wraps in ``orig``: `jobqueue migrate`), or None when there is none."""
    psycopg = sys.modules.get("psycopg")
    if psycopg is None:  # never imported: the error cannot be one of its
        return None
    from jobqueue.db.gateway import describe

    seen: BaseException | None = exc
    for _ in range(5):  # the error, what it wraps, and their causes: a short chain
        if seen is None:
            return None
        if isinstance(seen, psycopg.Error):
            return describe(seen)
        wrapped = getattr(seen, "orig", None)
        seen = wrapped if isinstance(wrapped, BaseException) else (seen.__cause__ or seen.__context__)
    return None


def run_command(command: Callable[[], int]) -> int:
    """``command()``'s exit status; Ctrl-C and a closed stdout end it as the module docstring says."""
    try:
        status = command()
        sys.stdout.flush()  # a reader gone shows here, inside the guard, not at the interpreter's exit
        return status
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        _discard_stdout()
        return PIPE_CLOSED


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of what is still buffered does not
    fail again (and print "Exception ignored … BrokenPipeError") — Python's documented recipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
