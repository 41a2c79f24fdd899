"""What the dashboard shows an operator, in a real browser (Debian's Chromium, the API and a worker
as real processes, `dashboard_stack`): the issue 20 findings, each one a test that failed before
its fix. Gone workers no longer pass for live ones (one stopped an hour ago still showed 23 %
utilization); the hour chart's axis scales to what it draws, failures included; the Retry button
stays in view with the detail panel open; an error is shown whole, not cut at ~30 characters; a
schedule's "error" badge says why; a retry overdue on a queue no live worker serves says so."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

from playwright.sync_api import Page, expect

from tests.support.browser import ARTIFACTS, dashboard
from tests.support.factories import make_job
from tests.support.maintenance import insert_schedule

LONG_TYPE = "reconcile-the-monthly-invoices-of-every-customer-in-every-region"
LONG_QUEUE = "billing-reconciliation-for-the-european-and-the-asian-regions"
LONG_ERROR = (
    "the payment provider answered 502 Bad Gateway three times in a row for invoice INV-2024-000123; "
    "the request id was 7f3c2a9e-51b4-4d0c-9a7e-2f1b6c8d9e0a and the body said: upstream connect error "
    "or disconnect/reset before headers, reset reason: connection termination — retry later"
)


def _add_error(conn, job_id, message: str, error_type: str = "GatewayError") -> None:
    conn.execute(
        "INSERT INTO jobqueue.job_errors (job_id, attempt, error_type, message) VALUES (%s, 1, %s, %s)",
        (job_id, error_type, message),
    )


def _gone_workers(conn) -> None:
    """A worker that stopped ten minutes ago at 23 % and one that went silent (lost) at 23 %."""
    conn.execute(
        "INSERT INTO jobqueue.workers (id, host, pid, queues, concurrency, status, utilization, started_at, "
        "last_heartbeat) VALUES "
        "('stopped-worker', 'old-host', 11, '{default}', 4, 'stopped', 0.23, now() - interval '50 minutes', "
        " now() - interval '10 minutes'), "
        "('silent-worker', 'old-host', 12, '{default}', 4, 'running', 0.23, now() - interval '40 minutes', "
        " now() - interval '5 minutes')"
    )


def test_the_workers_table_shows_live_workers_and_keeps_gone_ones_apart_without_utilization(dashboard_stack, conn):
    url, admin_key, _ = dashboard_stack
    _gone_workers(conn)
    with dashboard(url, admin_key) as page:
        expect(page.locator("#m-workers")).to_have_text("1", timeout=15_000)
        live = page.locator("#workers tbody tr")
        expect(live).to_have_count(1, timeout=10_000)  # the stack's worker only
        expect(live.first.locator(".pill")).to_have_text("running")
        for gone in ("stopped-worker", "silent-worker"):
            expect(page.locator(f"#workers tr[data-worker='{gone}']")).to_have_count(0)
        toggle = page.locator("#workers-gone-toggle")
        expect(toggle).to_have_text("Show 2 stopped or lost worker(s)")
        gone_table = page.locator("#workers-gone")
        expect(gone_table).to_be_hidden()

        toggle.click()
        expect(gone_table).to_be_visible()
        expect(toggle).to_have_text("Hide 2 stopped or lost worker(s)")
        rows = gone_table.locator("tbody tr")
        expect(rows).to_have_count(2)
        expect(gone_table.locator("tr[data-worker='stopped-worker'] .pill")).to_have_text("stopped")
        expect(gone_table.locator("tr[data-worker='silent-worker'] .pill")).to_have_text("lost")
        # No utilization figure for a worker that is gone: its last report is not current.
        assert "utilization" not in gone_table.locator("thead").inner_text()
        assert "%" not in gone_table.inner_text() and gone_table.locator(".bar").count() == 0
        time.sleep(2.5)  # the table is redrawn every second: it stays open
        expect(gone_table).to_be_visible()
        expect(rows).to_have_count(2)
        expect(page.locator("#m-utilization")).to_contain_text("2 gone")
        page.locator("#workers").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "dashboard-workers.png"), full_page=True)


def _red_rows(page: Page, selector: str) -> list[int]:
    """The y of each pixel row of the canvas that holds the failure line's red (#dc2626)."""
    return page.locator(selector).evaluate(
        """canvas => {
            const { width, height } = canvas, data = canvas.getContext("2d").getImageData(0, 0, width, height).data;
            const rows = [];
            for (let y = 0; y < height; y += 1) {
                for (let x = 0; x < width; x += 1) {
                    const i = (y * width + x) * 4;
                    const red = data[i] > 170 && data[i + 1] < 100 && data[i + 2] < 100 && data[i + 3] > 200;
                    if (red) { rows.push(y); break; }
                }
            }
            return rows;
        }"""
    )


def test_the_hour_chart_axis_scales_to_a_failure_spike(dashboard_stack, conn):
    """Minutes of 10 submitted and ~9.5 completed a second, then one of 90 failures a second: the
    axis took its top from submitted and completed only (10), and the spike ran off the canvas."""
    url, admin_key, _ = dashboard_stack
    start = datetime.now(timezone.utc).replace(second=0, microsecond=0) - timedelta(minutes=30)
    submitted = processed = failed = 0
    for minute in range(20):
        spike = minute == 10
        submitted += 600
        failed += 5400 if spike else 30
        processed += 6000 if spike else 600
        at = start + timedelta(minutes=minute)
        conn.execute(
            "INSERT INTO jobqueue.throughput_history VALUES (%s, %s, %s, %s, %s)",
            (at, at, submitted, processed, failed),
        )
    with dashboard(url, admin_key, viewport={"width": 1400, "height": 1000}) as page:
        expect(page.locator("#history-note")).to_contain_text("minute(s) recorded", timeout=10_000)
        chart = page.locator("#history-chart")
        ratio = page.evaluate("window.devicePixelRatio")
        plot_top = 10 * ratio  # the plot's top edge (10 px below the canvas's)
        rows = _red_rows(page, "#history-chart")
        assert rows, "no failure line drawn"
        # Drawn whole: no red in the margin above the plot (a line cut at the canvas's edge starts at y 0) …
        assert min(rows) >= plot_top - 2 * ratio, (min(rows), plot_top)
        # … and the spike is the highest thing on the chart, near its top (the axis fits it, not 10x more).
        height = chart.evaluate("c => c.height")
        assert min(rows) <= plot_top + 0.25 * height, (min(rows), height)
        assert float(chart.get_attribute("data-y-max")) >= 90
        chart.screenshot(path=str(ARTIFACTS / "dashboard-hour-chart.png"))


def test_the_retry_button_stays_in_view_with_the_detail_panel_open(dashboard_stack, conn):
    url, admin_key, _ = dashboard_stack
    dead = make_job(conn, state="dead_letter", job_type=LONG_TYPE, queue=LONG_QUEUE, max_attempts=1)
    _add_error(conn, dead, LONG_ERROR)
    for viewport in ({"width": 1400, "height": 1000}, {"width": 1100, "height": 900}):
        with dashboard(url, admin_key, viewport=viewport) as page:
            page.click("button.tab[data-view='dead']")
            row = page.locator(f"#dead tbody tr[data-id='{dead}']")
            expect(row).to_have_count(1, timeout=10_000)
            row.locator("td").first.click()
            expect(page.locator("#dead-detail")).to_contain_text("dead_letter", timeout=10_000)
            expect(page.locator("#dead-detail")).not_to_contain_text("null")
            button = row.locator("button.retry")
            # In view without scrolling: inside its panel's visible box, and the topmost element there.
            seen = button.evaluate(
                """b => {
                    const panel = b.closest(".panel"), r = b.getBoundingClientRect(), p = panel.getBoundingClientRect();
                    const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
                    return { inside: r.left >= p.left && r.right <= p.right - 1, top: hit === b || b.contains(hit),
                             fits: panel.scrollWidth <= panel.clientWidth + 1 };
                }"""
            )
            page.screenshot(path=str(ARTIFACTS / f"dashboard-dead-detail-{viewport['width']}.png"))
            assert seen == {"inside": True, "top": True, "fits": True}, (viewport, seen)


def test_an_error_is_shown_whole_in_the_lists_and_the_detail_panel(dashboard_stack, conn):
    """Error text was cut at ~30 characters (an ellipsis, the rest only in a tooltip)."""
    url, admin_key, _ = dashboard_stack
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    dead = make_job(conn, state="dead_letter", job_type="record", max_attempts=1)
    _add_error(conn, dead, LONG_ERROR)
    waiting = make_job(conn, state="failed", job_type="record", run_at=later, queue="parked")
    _add_error(conn, waiting, LONG_ERROR, "TimeoutError")
    huge = make_job(conn, state="dead_letter", job_type="record", max_attempts=1)
    _add_error(conn, huge, "x " * 3000 + "the end")
    with dashboard(url, admin_key) as page:
        for view, job_id, error_type in (("dead", dead, "GatewayError"), ("retrying", waiting, "TimeoutError")):
            page.click(f"button.tab[data-view='{view}']")
            cell = page.locator(f"#{view} tr[data-id='{job_id}'] td.error")
            expect(cell).to_have_count(1, timeout=10_000)
            text = cell.locator(".error-text")
            expect(text).to_have_text(f"{error_type}: {LONG_ERROR}")
            cut = text.evaluate("e => [e.scrollWidth - e.clientWidth, e.scrollHeight - e.clientHeight]")
            assert cut[0] <= 1 and cut[1] <= 1, (view, cut)  # wrapped, nothing hidden
        # A 6,000-character error is clamped to a few lines in the list, whole on hover and in the panel.
        page.click("button.tab[data-view='dead']")
        cell = page.locator(f"#dead tr[data-id='{huge}'] td.error")
        expect(cell).to_have_attribute("title", "GatewayError: " + "x " * 3000 + "the end")
        assert cell.evaluate("c => c.getBoundingClientRect().height") < 200
        page.screenshot(path=str(ARTIFACTS / "dashboard-errors.png"))
        cell.click()
        expect(page.locator("#dead-detail")).to_contain_text("the end", timeout=10_000)
        page.locator(f"#dead tr[data-id='{dead}'] td.error").click()
        expect(page.locator("#dead-detail")).to_contain_text(LONG_ERROR, timeout=10_000)


def test_a_schedule_in_error_shows_its_reason(dashboard_stack, conn):
    url, admin_key, _ = dashboard_stack
    insert_schedule(conn, "broken-report", "0 3 * * *", job_type="record")
    reason = "cron '0 3 * * *' cannot be used in time zone 'Mars/Olympus_Mons': unknown time zone"
    conn.execute("UPDATE jobqueue.schedules SET error = %s WHERE name = 'broken-report'", (reason,))
    insert_schedule(conn, "fine-report", "0 4 * * *", job_type="record")
    with dashboard(url, admin_key) as page:
        page.click("button.tab[data-view='schedules']")
        broken = page.locator("#schedules tr[data-name='broken-report']")
        expect(broken.locator(".pill")).to_have_text("error", timeout=10_000)
        expect(broken.locator(".schedule-error")).to_have_text(reason)
        expect(broken.locator(".schedule-error")).to_be_visible()
        fine = page.locator("#schedules tr[data-name='fine-report']")
        expect(fine.locator(".pill")).to_have_text("enabled")
        expect(fine.locator(".schedule-error")).to_have_count(0)
        page.screenshot(path=str(ARTIFACTS / "dashboard-schedule-error.png"))


def test_a_retry_overdue_on_a_queue_no_worker_serves_is_flagged(dashboard_stack, conn):
    """The worker serves `default` with the test app's job types: a retry due on `parked` (no worker
    serves it) or of a type it has no handler for waits for ever, and said nothing."""
    url, admin_key, _ = dashboard_stack
    now = datetime.now(timezone.utc)
    overdue = make_job(conn, state="failed", job_type="record", queue="parked", run_at=now - timedelta(minutes=5))
    no_handler = make_job(conn, state="failed", job_type="sned_email", run_at=now - timedelta(minutes=5))
    later = make_job(conn, state="failed", job_type="record", queue="parked", run_at=now + timedelta(hours=1))
    for job_id in (overdue, no_handler, later):
        _add_error(conn, job_id, "the vendor took too long", "TimeoutError")
    with dashboard(url, admin_key) as page:
        expect(page.locator("#m-workers")).to_have_text("1", timeout=15_000)  # the worker of `default` is up
        page.click("button.tab[data-view='retrying']")
        warning = page.locator(f"#retrying tr[data-id='{overdue}'] .unserved")
        expect(warning).to_have_text("overdue: no live worker serves queue parked", timeout=15_000)
        expect(warning).to_be_visible()
        expect(page.locator(f"#retrying tr[data-id='{no_handler}'] .unserved")).to_have_text(
            "overdue: no live worker of queue default has a handler for sned_email"
        )
        # Not due yet: not overdue, but it will wait too — said, without "overdue".
        expect(page.locator(f"#retrying tr[data-id='{later}'] .unserved")).to_have_text(
            "no live worker serves queue parked"
        )
        expect(page.locator("#retrying-unserved")).to_have_text(
            "2 retries on this page are overdue on queues or job types no live worker serves: "
            "they wait until a worker that can run them starts."
        )
        page.screenshot(path=str(ARTIFACTS / "dashboard-retrying-unserved.png"))
        page.locator(f"#retrying tr[data-id='{overdue}'] td").first.click()
        expect(page.locator("#retrying-detail .unserved")).to_have_text(
            "overdue: no live worker serves queue parked", timeout=10_000
        )
