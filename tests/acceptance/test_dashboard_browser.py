"""The dashboard in a real browser: Debian's headless Chromium driven by Playwright, with the API
and a worker as real processes on a real PostgreSQL. The page loads without console errors, its
counters move while jobs are enqueued and processed, the jobs view pages and shows a job's
detail, a queue pauses and resumes, and the retry button brings a dead job back. A screenshot
taken under load is saved in test-artifacts/."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

from jobqueue.client import Client
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, browser_page, dashboard, watch
from tests.support.factories import job_row, make_job
from tests.support.waiting import wait_until
from tests.support.workers import spawn_worker, terminate

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"


def _number(text: str) -> int:
    match = re.search(r"[\d,]+", text)
    return int(match.group(0).replace(",", "")) if match else 0


def test_dashboard_live_in_a_real_browser(dashboard_stack, conn):
    url, admin_key, client = dashboard_stack
    ARTIFACTS.mkdir(exist_ok=True)
    with browser_page() as (page, problems):
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
        wait_until(
            lambda: _number(page.inner_text("#m-processed")) >= 300,
            timeout=30,
            message="300 completions on the page",
        )
        assert page.locator("#queues tr[data-queue='default']").count() == 1

        # Under load: a producer keeps submitting short jobs while the worker runs them.
        stop = threading.Event()

        def produce() -> None:
            with Client(client.dsn, pool_size=1) as producer:
                while not stop.is_set():
                    producer.enqueue_many(
                        [{"job_type": "slow", "payload": {"seconds": 0.02}}] * 40
                        + [{"job_type": "record", "priority": "high"}] * 40
                    )
                    time.sleep(0.1)

        producing = threading.Thread(target=produce, daemon=True)
        producing.start()
        try:
            wait_until(
                lambda: (rate := page.inner_text("#m-done-rate")) not in ("–", "0.0") and rate,
                timeout=20,
                message="a completion rate on the page",
            )
            wait_until(lambda: _number(page.inner_text("#m-depth")) > 0, timeout=20, message="a backlog")
            # Let the chart draw some load (JOBQUEUE_SCREENSHOT_LOAD_SECONDS: longer, for the docs pictures).
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
        detail = page.locator("#jobs-detail")
        expect(detail).to_contain_text("record · completed", timeout=10_000)
        expect(detail).to_contain_text('"ok": true')
        expect(detail).not_to_contain_text("null")
        page.screenshot(path=str(ARTIFACTS / "dashboard-job-detail.png"))

        # Dead letters: a job that failed all its attempts shows every error; the retry button
        # brings a dead job back (and the worker completes it); purge removes what matches.
        failing_id = client.enqueue("always_fails")
        wait_until(
            lambda: job_row(conn, failing_id)["state"] == "dead_letter",
            timeout=20,
            message="always_fails dead-lettered",
        )
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
        wait_until(
            lambda: job_row(conn, dead_id)["state"] == "completed", timeout=20, message="the retried job completed"
        )
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
    assert not problems, problems


def _wait_state(conn, job_id, state: str) -> None:
    wait_until(
        lambda: (row := job_row(conn, job_id)) is not None and row["state"] == state,
        timeout=15,
        message=f"job {job_id} {state}",
    )


def _gone(conn, job_id) -> bool:
    return conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE id = %s", (job_id,)).fetchone()[0] == 0


LONG = "a-queue-name-that-someone-made-far-too-long-" * 5


def test_dashboard_actions_in_a_real_browser(dashboard_stack, conn):
    """Each action the dashboard offers, clicked in the browser and checked in the database: what a
    worker runs and its cancel, the Scheduled and Retrying tabs with their cancel and delete, the
    search by id, a dead job's final error, cut long names, cron schedules paused, resumed and run,
    a circuit held open and closed, and the hour chart read from the server after a reload."""
    url, admin_key, client = dashboard_stack
    ARTIFACTS.mkdir(exist_ok=True)
    problems: list[str] = []
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    # The history the maintenance leader would have written over the last half hour (older
    # minutes than the running historian touches), a circuit a worker declared, a schedule.
    start = datetime.now(timezone.utc).replace(second=0, microsecond=0) - timedelta(minutes=30)
    for minute in range(20):
        at = start + timedelta(minutes=minute)
        conn.execute(
            "INSERT INTO jobqueue.throughput_history VALUES (%s, %s, %s, %s, %s)",
            (at, at, minute * 600, minute * 540, minute * 30),
        )
    conn.execute(
        "INSERT INTO jobqueue.circuits (name, threshold, window_seconds, reset_after_seconds) "
        "VALUES ('payments-api', 5, 60, 30)"
    )
    conn.execute("INSERT INTO jobqueue.circuit_job_types (job_type, circuit) VALUES ('charge', 'payments-api')")
    client.schedules.add("nightly-report", "0 3 * * *", "record", payload={"n": 42})

    with browser_page() as (page, problems):
        page.goto(url + "/dashboard")
        page.fill("#api-key", admin_key)
        page.click("#key-form button")
        expect(page.locator("#m-workers")).to_have_text("1", timeout=15_000)

        # History survives a reload: right after it, the hour chart holds the server's minutes,
        # and the failure rate says it counts only what the page has seen, not "last minute".
        page.reload()
        expect(page.locator("#history-note")).to_have_text(
            re.compile(r"^(19|[2-9]\d) minute\(s\) recorded$"), timeout=10_000
        )
        expect(page.locator("#m-failure-sub")).to_contain_text("page open since", timeout=10_000)

        # What each worker runs: a slow job appears under its worker; its link opens the job,
        # whose Cancel asks the running handler to stop (it does: the job ends cancelled).
        running_id = client.enqueue("slow", {"seconds": 30})
        link = page.locator(f"#workers a[data-id='{running_id}']")
        expect(link).to_be_visible(timeout=15_000)
        expect(page.locator("#workers .running-now").first).to_contain_text("slow")
        page.screenshot(path=str(ARTIFACTS / "dashboard-overview-history.png"), full_page=True)
        link.click()
        detail = page.locator("#jobs-detail")
        expect(detail).to_contain_text("slow · processing", timeout=10_000)
        detail.locator("button.cancel").click()
        expect(page.locator("#banner")).to_contain_text("cancel requested", timeout=10_000)
        _wait_state(conn, running_id, "cancelled")

        # Search by id: a job in a queue no worker serves; Delete (two clicks) removes it.
        parked = client.enqueue("record", queue="parked", idempotency_key="parked-1")
        page.fill("#f-id", "not-an-id")
        page.click("#find-job")
        expect(page.locator("#banner")).to_contain_text("is not a job id")
        page.fill("#f-id", str(parked))
        page.press("#f-id", "Enter")
        expect(detail).to_contain_text("record · pending", timeout=10_000)
        expect(detail).to_contain_text("None yet: the job is pending.")
        detail.locator("button.delete").click()
        detail.locator("button.delete").click()  # destructive: the second click confirms
        expect(page.locator("#banner")).to_contain_text("deleted", timeout=10_000)
        assert _gone(conn, parked)
        assert conn.execute("SELECT count(*) FROM jobqueue.idempotency_keys WHERE key = 'parked-1'").fetchone()[0] == 0

        # Scheduled: jobs whose run_at is ahead, shown with it; one cancelled, one deleted.
        to_cancel = client.enqueue("record", run_at=later)
        to_delete = client.enqueue("record", run_at=later, queue=LONG)
        page.click("button.tab[data-view='scheduled']")
        rows = page.locator("#scheduled tbody tr")
        expect(rows).to_have_count(2, timeout=10_000)
        expect(page.locator(f"#scheduled tr[data-id='{to_cancel}'] td.run-at")).to_have_text(
            later.astimezone().strftime("%Y-%m-%d %H:%M:%S")
        )
        long_cell = page.locator(f"#scheduled tr[data-id='{to_delete}'] td.name[title='{LONG}']")
        # Cut with an ellipsis (whole in the tooltip), and the table still fits its panel.
        cut = long_cell.locator(".cut").evaluate(
            "e => [e.clientWidth, e.scrollWidth, getComputedStyle(e).textOverflow]"
        )
        assert cut[0] <= 220 < cut[1] and cut[2] == "ellipsis", cut
        assert page.locator("#scheduled").evaluate("t => t.parentElement.scrollWidth <= t.parentElement.clientWidth")
        page.screenshot(path=str(ARTIFACTS / "dashboard-scheduled.png"))
        page.locator(f"#scheduled tr[data-id='{to_cancel}'] button.cancel").click()
        expect(rows).to_have_count(1, timeout=10_000)
        assert job_row(conn, to_cancel)["state"] == "cancelled"
        page.locator(f"#scheduled tr[data-id='{to_delete}'] button.delete").click()
        page.locator(f"#scheduled tr[data-id='{to_delete}'] button.delete").click()
        expect(page.locator("#scheduled-empty")).to_be_visible(timeout=10_000)
        assert _gone(conn, to_delete)

        # Retrying: a job waiting for its retry, with its last error and its retry time.
        waiting = make_job(conn, state="failed", job_type="record", run_at=later, queue="parked")
        conn.execute(
            "INSERT INTO jobqueue.job_errors (job_id, attempt, error_type, message) "
            "VALUES (%s, 1, 'TimeoutError', 'the vendor took too long')",
            (waiting,),
        )
        page.click("button.tab[data-view='retrying']")
        row = page.locator(f"#retrying tr[data-id='{waiting}']")
        expect(row).to_contain_text("TimeoutError: the vendor took too long", timeout=10_000)
        expect(row.locator("button.delete")).to_have_count(0)  # it has run: cancel only
        page.screenshot(path=str(ARTIFACTS / "dashboard-retrying.png"))
        row.locator("button.cancel").click()
        expect(page.locator("#retrying-empty")).to_be_visible(timeout=10_000)
        assert job_row(conn, waiting)["state"] == "cancelled"

        # A dead job's error is its final error, not a "Result".
        failing = client.enqueue("always_fails")
        _wait_state(conn, failing, "dead_letter")
        page.click("button.tab[data-view='dead']")
        page.locator(f"#dead tbody tr[data-id='{failing}']").click()
        dead_detail = page.locator("#dead-detail")
        expect(dead_detail).to_contain_text("Final error", timeout=10_000)
        expect(dead_detail.locator("h2", has_text="Result")).to_have_count(0)

        # Schedules: pause, resume, run now.
        page.click("button.tab[data-view='schedules']")
        schedule = page.locator("#schedules tr[data-name='nightly-report']")
        expect(schedule).to_contain_text("0 3 * * * (UTC)", timeout=10_000)
        schedule.locator("button.pause").click()
        expect(schedule.locator(".pill")).to_have_text("paused", timeout=10_000)
        assert (
            conn.execute("SELECT enabled FROM jobqueue.schedules WHERE name = 'nightly-report'").fetchone()[0] is False
        )
        schedule.locator("button.resume").click()
        expect(schedule.locator(".pill")).to_have_text("enabled", timeout=10_000)
        assert (
            conn.execute("SELECT enabled FROM jobqueue.schedules WHERE name = 'nightly-report'").fetchone()[0] is True
        )
        schedule.locator("button.run").click()
        expect(page.locator("#banner")).to_contain_text("enqueued job", timeout=10_000)
        fired = page.inner_text("#banner").rsplit(" ", 1)[1].rstrip(".")
        _wait_state(conn, fired, "completed")
        assert job_row(conn, fired)["payload"] == {"n": 42}
        page.screenshot(path=str(ARTIFACTS / "dashboard-schedules.png"))

        # Circuits: hold one open, then close it.
        page.click("button.tab[data-view='circuits']")
        circuit = page.locator("#circuits tr[data-name='payments-api']")
        expect(circuit).to_contain_text("charge", timeout=10_000)
        circuit.locator("button.open").click()
        expect(circuit.locator(".pill")).to_have_text("open", timeout=10_000)
        assert conn.execute("SELECT state, forced_by_admin FROM jobqueue.circuits").fetchone() == ("open", True)
        page.screenshot(path=str(ARTIFACTS / "dashboard-circuits.png"))
        circuit.locator("button.close").click()
        expect(circuit.locator(".pill")).to_have_text("closed", timeout=10_000)
        assert conn.execute("SELECT state, forced_by_admin FROM jobqueue.circuits").fetchone() == ("closed", False)
    assert not problems, problems


def test_the_api_docs_render_offline_in_a_real_browser(dashboard_stack):
    """/schema once showed only "Unable to render this definition": Swagger UI 4 cannot read the
    OpenAPI 3.1 schema Litestar writes, and the page's icon came from a CDN. Now the operations
    render under the page's Content-Security-Policy (no console error: a refused script or style
    would log one), and the page fetches nothing from another host."""
    url, _, _ = dashboard_stack
    requested: list[str] = []
    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.on("request", lambda request: requested.append(request.url))
        watch(page, problems)
        try:
            page.goto(url + "/schema")
            expect(page.locator(".opblock").first).to_be_visible(timeout=15_000)
            assert page.locator(".opblock").count() > 10
            assert page.get_by_text("Unable to render this definition").count() == 0
            page.locator(".opblock-summary").first.click()  # an operation opens (its styles and icons load)
            expect(page.locator(".opblock-body").first).to_be_visible(timeout=10_000)
        finally:
            browser.close()
    fetched = [address for address in requested if address.startswith("http")]
    assert fetched and all(address.startswith(url + "/") for address in fetched), fetched
    assert not problems, problems


class _FramingSite:
    """Another origin (its own port) whose page frames the dashboard, as a clickjacker's would."""

    def __init__(self, target: str) -> None:
        import http.server

        page = (
            f'<!doctype html><title>win a prize</title><iframe id="victim" src="{target}" '
            'width="1200" height="800"></iframe>'
        ).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *_args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "_FramingSite":
        self.thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_another_site_cannot_frame_the_logged_in_dashboard(dashboard_stack):
    """Issue 18: a page on another port framed the dashboard, whose key the browser keeps, so its
    purge and retry buttons could be clicked through an invisible frame. The browser now refuses
    to render it in a frame (frame-ancestors 'none', X-Frame-Options DENY)."""
    url, admin_key, _ = dashboard_stack
    console: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context()
        try:
            own = context.new_page()  # the operator logged in earlier: the key is in localStorage
            own.goto(url + "/dashboard")
            own.fill("#api-key", admin_key)
            own.click("#key-form button")
            expect(own.locator("#live")).to_have_class(re.compile(r"\bok\b"), timeout=10_000)
            with _FramingSite(url + "/dashboard") as site:
                page = context.new_page()
                page.on("console", lambda message: console.append(message.text))
                page.goto(site.url)
                page.wait_for_load_state("load")
                wait_until(lambda: len(page.frames) == 2, timeout=10, message="the frame")
                frame = page.frames[1]
                time.sleep(1.0)  # what the dashboard's script would need to show its buttons

                def dashboard_in_frame() -> bool:
                    try:
                        return bool(frame.evaluate("() => document.querySelector('#dead-purge') !== null"))
                    except Exception:  # an error page that cannot be scripted: not the dashboard
                        return False

                assert not dashboard_in_frame(), "the dashboard rendered inside another site's frame"
                assert frame.url != url + "/dashboard" or any("frame-ancestors" in text for text in console), (
                    frame.url,
                    console,
                )
        finally:
            browser.close()


def test_the_dashboard_pauses_queues_whatever_their_names(dashboard_stack, conn):
    """Issue 18: a queue whose name holds "/" could not be paused from the dashboard (404); names
    with %, ?, #, spaces and other scripts go through the same path."""
    url, admin_key, client = dashboard_stack
    names = ["team/mail", "50% off?", "tag #1 ü/日本"]
    for name in names:
        client.enqueue("record", queue=name)  # no worker serves it: it waits, so the queue is listed
    with browser_page() as (page, problems):
        page.goto(url + "/dashboard")
        page.fill("#api-key", admin_key)
        page.click("#key-form button")
        for name in names:
            row = page.locator("#queues tbody tr").filter(
                has=page.locator(f"td.name[title={json.dumps(name, ensure_ascii=False)}]")
            )
            expect(row).to_have_count(1, timeout=15_000)
            row.locator("button").click()
            expect(row.locator(".pill")).to_have_text("paused", timeout=10_000)
            assert conn.execute("SELECT paused FROM jobqueue.queue_settings WHERE queue = %s", (name,)).fetchone() == (
                True,
            ), name
            row.locator("button").click()
            expect(row.locator(".pill")).to_have_text("active", timeout=10_000)
        assert page.locator("#banner").is_hidden() or "Could not" not in page.inner_text("#banner")
    assert conn.execute("SELECT count(*) FROM jobqueue.queue_settings WHERE paused").fetchone()[0] == 0
    assert not problems, problems


def test_the_job_view_shows_a_running_jobs_progress_and_follows_it(dashboard_stack, dsn):
    """A job reporting progress on a real worker: its detail has the ordering key and a progress
    bar, which moves while the panel stays open (re-read every 2 s)."""
    url, admin_key, client = dashboard_stack
    reporter = spawn_worker(dsn, "tests.support.ledger_app:queue", "--queues", "reports")
    try:
        job_id = client.enqueue("report", {"steps": 40, "pause": 1.0}, queue="reports", ordering_key="customer-42")
        wait_until(lambda: (p := client.get(job_id).progress) is not None and p.done >= 1, timeout=20)
        with dashboard(url, admin_key) as page:
            page.click("button.tab[data-view='jobs']")
            page.fill("#f-id", str(job_id))
            page.click("#find-job")
            detail = page.locator("#jobs-detail")
            expect(detail).to_contain_text("report · processing", timeout=10_000)
            expect(detail).to_contain_text("customer-42")
            expect(detail.locator("progress.job-progress")).to_be_visible()
            first = detail.locator("h2:has-text('Progress') + progress + p").inner_text()
            expect(detail).not_to_contain_text(first, timeout=10_000)  # the figure moved on
            page.screenshot(path=str(ARTIFACTS / "dashboard-job-progress.png"), full_page=True)
    finally:
        terminate(reporter, signal.SIGKILL)  # its job would run for 40 s
