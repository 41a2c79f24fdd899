"""The headers every response carries, so a browser holding the dashboard cannot be turned against it.

Why: a page on another origin framed the logged-in dashboard (its key sits in the browser's
localStorage), so its purge and retry buttons could be clicked through an invisible frame
(clickjacking, issue 18). Now no response may be framed, and pages run only this API's own files:

- ``Content-Security-Policy``: HTML (the dashboard, Swagger UI at /schema) gets `PAGE_POLICY` —
  scripts, styles, fonts, images and fetches from this origin only (images also as ``data:``
  URIs, which Swagger UI's stylesheet uses for its icons), no inline script or style, no plugins,
  no ``<base>``, no form posts, no framing. Both pages load every script from a file (the
  dashboard's routes are a JSON data block; Swagger UI's start-up is `jobqueue.api.openapi_ui`'s
  script), so the policy needs no ``'unsafe-inline'``. Every other response (JSON, scripts,
  styles, errors) gets `DATA_POLICY`: nothing at all may run or load from it, should a browser be
  led to render it as a page.
- ``X-Frame-Options: DENY`` for browsers that predate ``frame-ancestors``;
  ``X-Content-Type-Options: nosniff``, so a JSON answer echoing input is never sniffed into HTML
  or script; ``Referrer-Policy: no-referrer``, so no URL of the API (with its query: queue names,
  job ids) is sent to another site.

A handler that sets one of these itself keeps its own; the hook adds what is missing, on every
response Litestar sends (errors, 404s of unknown paths and static files included).
"""

from __future__ import annotations

from litestar.types import Message, Scope

#: The policy of the HTML pages the API serves.
PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
#: The policy of everything else: nothing runs, nothing loads, nothing frames it.
DATA_POLICY = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
_CSP = b"content-security-policy"
_ALWAYS = ((b"x-frame-options", b"DENY"), (b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"))
_PAGE, _DATA = PAGE_POLICY.encode(), DATA_POLICY.encode()


async def add_security_headers(message: Message, _scope: Scope) -> None:
    """``before_send`` hook: the headers above on each response's start. Works on the raw header
    list (it runs for every submission: a few microseconds, not a headers object per response)."""
    if message["type"] != "http.response.start":
        return
    headers = message.get("headers")
    if not isinstance(headers, list):
        headers = message["headers"] = list(headers or ())
    present = {bytes(name).lower(): value for name, value in headers}
    if _CSP not in present:
        page = bytes(present.get(b"content-type", b"")).startswith(b"text/html")
        headers.append((_CSP, _PAGE if page else _DATA))
    headers.extend(header for header in _ALWAYS if header[0] not in present)
