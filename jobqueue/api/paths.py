"""Names in URL paths: ``/queues/{name}/pause``, ``/limits/{scope}/{name}``, ``/circuits/{name}/…``,
``/schedules/{name}/…`` take any name, ``/`` and ``%`` included, percent-encoded by the caller
(``urllib.parse.quote(name, safe="")``, JavaScript's ``encodeURIComponent``).

Why this is needed: the ASGI server hands Litestar the path with every escape decoded, so the
queue ``team/mail`` (``/queues/team%2Fmail/pause``) arrived as four segments and was a 404, and the
queue ``a/`` (``/queues/a%2F/pause``) arrived as ``/queues/a//pause``, which Litestar normalises to
``/queues/a/pause``: it paused the queue ``a`` (issue 18).

How: before routing (`route_encoded_names`, the app's ``__call__``), a path whose raw form holds
``%2F`` or ``%25`` is decoded again from the raw bytes with those two escapes kept, so an encoded
slash stays inside its segment and routing sees the segments the caller meant; every other escape
(``?``, ``#``, spaces, UTF-8) is decoded as the server does. After routing (`decode_names`, before
each handler), the path parameters decode the two kept escapes. Other paths are untouched, and a
kept ``%2F`` in a static part of a path simply matches no route.

Not addressable in a path at all: the names ``.`` and ``..`` (URL parsers resolve them as dot
segments, even encoded as ``%2E``); use the command line, Python or SQL for those.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_to_bytes

from litestar.types import Scope

_KEPT = re.compile(rb"%(2[fF]|25)")
_ESCAPES = {b"2F": "%2F", b"2f": "%2F", b"25": "%25"}
_UNESCAPE = re.compile(r"%(2F|25)")
_CHARACTERS = {"2F": "/", "25": "%"}


def _has_kept_escapes(scope: Scope) -> bool:
    raw = scope.get("raw_path") or b""
    return b"%" in raw and _KEPT.search(raw) is not None


def route_encoded_names(scope: Scope) -> None:
    """Re-decode ``scope["path"]`` from the raw path, keeping ``%2F`` and ``%25`` (see above)."""
    if scope.get("type") not in ("http", "websocket") or not _has_kept_escapes(scope):
        return
    pieces = _KEPT.split(scope["raw_path"])  # text, escape, text, escape, …, text
    scope["path"] = "".join(
        unquote_to_bytes(piece).decode("utf-8", "replace") if index % 2 == 0 else _ESCAPES[piece]
        for index, piece in enumerate(pieces)
    )


def decode_names(scope: Scope) -> None:
    """Decode the kept escapes in the routed path parameters (names), once per such request."""
    if not _has_kept_escapes(scope):
        return
    params = scope.get("path_params") or {}
    scope["path_params"] = {
        name: _UNESCAPE.sub(lambda found: _CHARACTERS[found.group(1)], value) if isinstance(value, str) else value
        for name, value in params.items()
    }
