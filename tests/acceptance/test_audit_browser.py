"""The dashboard's audit log page in a real browser (headless Chromium, the API and a worker as real
processes): reached from the dashboard's tabs with the key typed there, it lists the actions the
dashboard's own buttons just made, newest first, names the key's producer, filters, pages with
"Load more", writes a name a producer chose as text (never as markup), and a producer key sees
only its own entries. The page complains of nothing (console, exceptions)."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.support.browser import dashboard
from tests.support.factories import make_job

HOSTILE = '<img src=x onerror="window.owned=1">'


def test_the_audit_page_lists_what_the_dashboard_did(dashboard_stack, conn):
    url, admin_key, client = dashboard_stack
    for n in range(60):
        client.pause_queue(f"bulk-{n}", force=True)  # more than a page
    client.pause_queue(HOSTILE, force=True)
    with dashboard(url, admin_key) as page:
        row = page.locator("#queues tr[data-queue='default']")
        expect(row).to_have_count(1, timeout=15_000)
        row.locator("button").click()
        expect(row.locator(".pill")).to_have_text("paused", timeout=10_000)
        page.click("a.tab[href='/dashboard/audit']")
        expect(page).to_have_url(re.compile(r"/dashboard/audit$"))
        first = page.locator("#audit tbody tr").first
        expect(first).to_contain_text("queue.pause", timeout=10_000)
        expect(first).to_contain_text("default")
        expect(first).to_contain_text("ops")  # the admin key's producer
        expect(first).to_contain_text("jobqueue-api")
        hostile = page.locator("#audit tbody tr").nth(1)
        expect(hostile).to_contain_text(HOSTILE)  # the name, as text
        assert page.locator("#audit tbody img").count() == 0
        assert page.evaluate("window.owned") is None
        expect(page.locator("#audit tbody tr")).to_have_count(50)
        page.click("#audit-more")
        every = conn.execute("SELECT count(*) FROM jobqueue.audit_log").fetchone()[0]
        expect(page.locator("#audit tbody tr")).to_have_count(every, timeout=10_000)  # each once
        assert not page.locator("#audit-more").is_visible()
        page.fill("#a-target", "default")
        page.click("#audit-filters button[type=submit]")
        expect(page.locator("#audit tbody tr")).to_have_count(1, timeout=10_000)

        producer_key = client.create_api_key("alice")[0]
        job = make_job(conn, producer_id="alice")
        client.cancel(job, producer_id="alice")  # an operator's cancel of alice's job: not hers
        page.fill("#api-key", producer_key)
        page.click("#key-form button")
        page.fill("#a-target", "")
        page.click("#audit-filters button[type=submit]")
        expect(page.locator("#audit-empty")).to_be_visible(timeout=10_000)
