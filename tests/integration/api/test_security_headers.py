"""Every response carries the browser-side protections (issue 18): a page on another port could
frame the logged-in dashboard and have its purge and retry buttons clicked through it. The
browser half (a framing page that cannot frame it, the pages working under their policies) is in
tests/acceptance/test_dashboard_browser.py."""

from __future__ import annotations

import re

import pytest

from jobqueue.api import dashboard


def _policy(response) -> dict[str, str]:
    """The Content-Security-Policy as {directive: sources}."""
    text = response.headers.get("content-security-policy", "")
    return {part.split()[0]: " ".join(part.split()[1:]) for part in text.split(";") if part.strip()}


@pytest.mark.parametrize(
    "who, method, path",
    [
        ("alice", "GET", "/jobs"),
        ("alice", "POST", "/jobs"),
        (None, "GET", "/jobs"),
        ("alice", "GET", "/jobs/0190e2a4-0000-7000-8000-000000000000"),
        ("alice", "GET", "/nowhere"),
        ("alice", "GET", "/workers"),
        (None, "GET", "/healthz"),
        (None, "GET", "/"),
        (None, "GET", "/dashboard"),
        (None, "GET", "/dashboard/static/dashboard.js"),
        (None, "GET", "/dashboard/static/dashboard.css"),
        (None, "GET", "/schema"),
        (None, "GET", "/schema/swagger"),
        (None, "GET", "/schema/openapi.json"),
        (None, "GET", "/schema/assets/swagger-ui.css"),
        (None, "GET", "/metrics"),
        ("admin", "DELETE", "/admin/dlq"),
    ],
)
def test_every_response_carries_the_security_headers(http, who, method, path):
    response = http(who).request(method, path, json={} if method == "POST" else None)
    assert response.headers.get("x-content-type-options") == "nosniff", (path, response.headers)
    assert response.headers.get("referrer-policy") == "no-referrer"
    assert response.headers.get("x-frame-options") == "DENY"  # browsers older than CSP level 2
    policy = _policy(response)
    assert policy.get("frame-ancestors") == "'none'", (path, policy)
    assert "unsafe-inline" not in policy.get("script-src", "") and "unsafe-eval" not in str(policy)
    if not response.headers.get("content-type", "").startswith("text/html"):
        assert policy.get("default-src") == "'none'", (path, policy)  # nothing a sniffed response could run


def test_the_pages_run_only_their_own_files(http):
    for path in ("/dashboard", "/schema"):
        response = http(None).get(path)
        policy = _policy(response)
        assert policy["default-src"] == "'none'" and policy["script-src"] == "'self'", policy
        assert policy["base-uri"] == "'none'" and policy["form-action"] in ("'none'", "'self'")
        # No inline script for the policy to forbid: every <script> loads a file or is plain data.
        scripts = re.findall(r"<script\b([^>]*)>(.*?)</script>", response.text, re.S)
        assert scripts, response.text[:300]
        for attributes, body in scripts:
            assert "src=" in attributes and not body.strip() or 'type="application/json"' in attributes, attributes
        assert not re.search(r"\son[a-z]+=", response.text)  # no inline event handlers either
        assert "style=" not in response.text


def test_the_dashboard_reads_its_routes_from_data_not_an_inline_script(http):
    page = http(None).get("/dashboard").text
    found = re.search(r'<script type="application/json" id="jobqueue-routes">(.*?)</script>', page, re.S)
    assert found and '"/admin/dlq"' in found.group(1)
    assert "window.JOBQUEUE_ROUTES" not in page and set(dashboard.ROUTES) <= set(
        re.findall(r'"(\w+)":', found.group(1))
    )
