"""Where jobqueue's SQL files and Alembic revisions are, in a checkout and in an installed wheel.

The top-level layout keeps `sql/` and `migrations/` beside the package. An editable install or a
checkout reads them there; a wheel installs them as data files under ``<prefix>/share/jobqueue/``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[2]  # jobqueue/db/paths.py -> the checkout


def resource_dir(name: str) -> Path:
    """``sql`` or ``migrations``: the checkout's folder if present, else the installed copy."""
    for candidate in (_CHECKOUT / name, Path(sys.prefix) / "share" / "jobqueue" / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"jobqueue's {name}/ folder is missing (looked beside the package and in {sys.prefix}/share)"
    )
