"""Debian's headless Chromium driven by Playwright, for the dashboard's browser tests: one place
for the browser's flags and for collecting what the page complains about (a console error or
warning, an uncaught exception), which every such test asserts is nothing."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Iterator

from playwright.sync_api import Page, expect, sync_playwright

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
VIEWPORT = {"width": 1400, "height": 1000}
#: where the browser tests save their screenshots
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def watch(page: Page, problems: list[str]) -> None:
    """Append the page's console errors and warnings, and its uncaught exceptions, to ``problems``."""
    page.on(
        "console",
        lambda message: (
            problems.append(f"console {message.type}: {message.text}") if message.type in ("error", "warning") else None
        ),
    )
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))


@contextlib.contextmanager
def browser_page(viewport: dict | None = None) -> Iterator[tuple[Page, list[str]]]:
    """A fresh browser and page, watched (see `watch`); closed on the way out."""
    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=viewport or VIEWPORT)
            watch(page, problems)
            yield page, problems
        finally:
            browser.close()


@contextlib.contextmanager
def dashboard(url: str, key: str, viewport: dict | None = None) -> Iterator[Page]:
    """The dashboard with ``key`` typed in and its first figures shown; no complaint from the page
    by the end."""
    ARTIFACTS.mkdir(exist_ok=True)
    with browser_page(viewport) as (page, problems):
        page.goto(url + "/dashboard")
        page.fill("#api-key", key)
        page.click("#key-form button")
        expect(page.locator("#live")).to_have_class(re.compile(r"\bok\b"), timeout=10_000)
        yield page
    assert not problems, problems
