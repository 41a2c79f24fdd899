"""The dashboard in a real browser: Debian's headless Chromium driven by Playwright, with the API
and a worker as real processes on a real PostgreSQL. The page loads without console errors, its
counters move while jobs are enqueued and processed, the jobs view pages and shows a job's
detail, a queue pauses and resumes, and the retry button brings a dead job back. A screenshot
taken under load is saved in test-artifacts/."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from jobqueue.client import Client
from jobqueue.devdb import free_port
from jobqueue.api.serve import wait_ready
from tests.support.factories import job_row, make_job
from tests.support.waiting import wait_until
from tests.support.workers import spawn_worker, terminate

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture
def stack(dsn):
    """API (a real `jobqueue api` process) + a real worker, snapshots refreshed every 0.5 s."""
    assert os.path.exists(CHROMIUM), "chromium is missing: `make system-deps` installs Debian's chromium"
    port = free_port()
    env = dict(os.environ, JOBQUEUE_DSN=dsn, JOBQUEUE_METRICS_TTL="0.5", JOBQUEUE_STATS_INTERVAL="0.5",
               JOBQUEUE_API_KEY_CACHE_SECONDS="0")
    api = subprocess.Popen([sys.executable, "-c", "import sys; from jobqueue.cli import main; sys.exit(main())",
                            "api", "--port", str(port)], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    worker = spawn_worker(dsn, "tests.support.apps:queue", "--concurrency", "8",
                          env={"JOBQUEUE_STATS_INTERVAL": "0.5"})
    url = f"http://127.0.0.1:{port}"
    with Client(dsn, pool_size=2) as client:
        admin_key = client.create_api_key("ops", role="admin")[0]
        try:
            assert wait_ready(url, timeout=30), "API ready"
            yield url, admin_key, client
        finally:
            worker_output = terminate(worker)
            api_output = terminate(api, timeout=20)
    assert "Traceback" not in api_output, api_output
    assert "Traceback" not in worker_output, worker_output


def _number(text: str) -> int:
    match = re.search(r"[\d,]+", text)
    return int(match.group(0).replace(",", "")) if match else 0


def test_dashboard_live_in_a_real_browser(stack, conn):
    url, admin_key, client = stack
    ARTIFACTS.mkdir(exist_ok=True)
    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("console", lambda message: problems.append(f"console {message.type}: {message.text}")
                if message.type in ("error", "warning") else None)
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        try:
            page.goto(url + "/dashboard")
            # The figures show hosts, processes and queues: nothing until an admin key is given.
            expect(page.locator("#live")).to_have_text("offline: no API key", timeout=10_000)
            page.fill("#api-key", admin_key)
            page.click("#key-form button")
            expect(page.locator("#live")).to_have_class(re.compile(r"\bok\b"), timeout=10_000)
            expect(page.locator("#m-workers")).to_have_text("1", timeout=15_000)

            # Counters move: 300 quick jobs are submitted, then completed by the worker.
            client.enqueue_many([{"job_type": "record", "payload": {"n": i}} for i in range(300)])
            expect(page.locator("#m-submitted")).to_contain_text("300 submitted", timeout=15_000)
            wait_until(lambda: _number(page.inner_text("#m-processed")) >= 300, timeout=30,
                       message="300 completions on the page")
            assert page.locator("#queues tr[data-queue='default']").count() == 1

            # Under load: a producer keeps submitting short jobs while the worker runs them.
            stop = threading.Event()

            def produce() -> None:
                with Client(client.dsn, pool_size=1) as producer:
                    while not stop.is_set():
                        producer.enqueue_many([{"job_type": "slow", "payload": {"seconds": 0.02}}] * 40
                                              + [{"job_type": "record", "priority": "high"}] * 40)
                        time.sleep(0.1)

            producing = threading.Thread(target=produce, daemon=True)
            producing.start()
            try:
                wait_until(lambda: (rate := page.inner_text("#m-done-rate")) not in ("–", "0.0") and rate,
                           timeout=20, message="a completion rate on the page")
                wait_until(lambda: _number(page.inner_text("#m-depth")) > 0, timeout=20, message="a backlog")
                # Let the chart draw some load (JOBQUEUE_SCREENSHOT_LOAD_SECONDS: longer, for the README's picture).
                time.sleep(float(os.environ.get("JOBQUEUE_SCREENSHOT_LOAD_SECONDS", "6")))
                page.screenshot(path=str(ARTIFACTS / "dashboard-under-load.png"), full_page=True)
            finally:
                stop.set()
                producing.join(10)

            # Pause and resume a queue (admin key).
            row = page.locator("#queues tr[data-queue='default']")
            row.locator("button").click()
            expect(row.locator(".pill")).to_have_text("paused", timeout=10_000)
            assert conn.execute("SELECT paused FROM jobqueue.queue_settings WHERE queue = 'default'").fetchone()[0]
            row.locator("button").click()
            expect(row.locator(".pill")).to_have_text("active", timeout=10_000)

            # Jobs view: filter, page, open a job's detail.
            page.click("button.tab[data-view='jobs']")
            page.select_option("#f-state", "completed")
            page.select_option("#f-priority", "normal")
            page.fill("#f-type", "record")
            page.click("#job-filters button")
            expect(page.locator("#jobs tbody tr")).to_have_count(50, timeout=10_000)
            page.click("#jobs-more")
            expect(page.locator("#jobs tbody tr")).to_have_count(100, timeout=10_000)
            page.locator("#jobs tbody tr").first.click()
            detail = page.locator("#job-detail")
            expect(detail).to_contain_text("record · completed", timeout=10_000)
            expect(detail).to_contain_text('"ok": true')
            expect(detail).not_to_contain_text("null")
            page.screenshot(path=str(ARTIFACTS / "dashboard-job-detail.png"))

            # Dead letters: a job that failed all its attempts shows every error; the retry button
            # brings a dead job back (and the worker completes it); purge removes what matches.
            failing_id = client.enqueue("always_fails")
            wait_until(lambda: job_row(conn, failing_id)["state"] == "dead_letter", timeout=20,
                       message="always_fails dead-lettered")
            dead_id = make_job(conn, state="dead_letter", job_type="record", payload={"n": 7}, max_attempts=1)
            page.click("button.tab[data-view='dead']")
            expect(page.locator("#dead tbody tr")).to_have_count(2, timeout=10_000)
            page.locator(f"#dead tbody tr[data-id='{failing_id}']").click()
            dead_detail = page.locator("#dead-detail")
            expect(dead_detail).to_contain_text("Attempts with errors (3)", timeout=10_000)
            expect(dead_detail).to_contain_text("boom on attempt 3")
            expect(dead_detail).to_contain_text("Traceback")
            page.screenshot(path=str(ARTIFACTS / "dashboard-dead-letters.png"))

            page.locator(f"#dead tbody tr[data-id='{dead_id}'] button.retry").click()
            expect(page.locator("#banner")).to_contain_text("back in its queue", timeout=10_000)
            wait_until(lambda: job_row(conn, dead_id)["state"] == "completed", timeout=20,
                       message="the retried job completed")
            expect(page.locator("#dead tbody tr")).to_have_count(1, timeout=10_000)

            page.fill("#d-type", "always_fails")
            page.click("#dead-filters button[type='submit']")
            page.click("#dead-purge")
            page.click("#dead-purge")  # destructive: the second click confirms
            expect(page.locator("#banner")).to_contain_text("Purge: 1 dead job(s)", timeout=10_000)
            expect(page.locator("#dead-empty")).to_be_visible(timeout=10_000)
            assert conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE id = %s", (failing_id,)).fetchone()[0] == 0

            page.click("button.tab[data-view='overview']")
            expect(page.locator("#m-dead")).to_have_text("0", timeout=10_000)
        finally:
            browser.close()
    assert not problems, problems
