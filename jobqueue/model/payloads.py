"""Payloads and results as jsonb stores them: the one JSON encoding every call uses, and the check
for the NUL character jsonb cannot hold. Used where a value is validated (enqueue, schedules), sealed
(a handler's result) and written (the store)."""

from __future__ import annotations

import json
import re
from typing import Any

#: One encoder for every call: json.dumps with options builds a new JSONEncoder each time.
_ENCODE = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def dumps(value: Any) -> str:
    """JSON for jsonb parameters; raises TypeError/ValueError for what JSON cannot hold."""
    return _ENCODE(value)


#: A NUL character as `dumps` writes it: \u0000 after an even number of backslashes (an odd
#: number makes it the literal text "\u0000", which jsonb stores fine).
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def holds_nul(json_text: str) -> bool:
    """Does this `dumps` output hold a NUL character? jsonb (like PostgreSQL text) cannot store one."""
    return "\\u0000" in json_text and _ESCAPED_NUL.search(json_text) is not None
