"""The API's observability endpoints over real HTTP: /metrics (Prometheus), the dashboard page,
its files and its JSON, and the REST producer span joined to the caller's traceparent."""

from __future__ import annotations

import time

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from jobqueue.observability import tracing
from jobqueue.observability.prometheus import CONTENT_TYPE
from tests.integration.api.conftest import ApiServer, api_settings
from tests.support.apps import queue as test_app
from tests.support.factories import job_row, make_job
from tests.support.prometheus import parse, total, value
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, test_settings

CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
METRICS_TOKEN = "scrape-token-for-tests"
METRICS = {"Authorization": f"Bearer {METRICS_TOKEN}"}


@pytest.fixture
def server(dsn):
    api = ApiServer(api_settings(dsn, metrics_ttl=0.0, metrics_token=METRICS_TOKEN)).start()
    yield api
    api.stop()


@pytest.fixture
def admin_key(dsn) -> str:
    from jobqueue.client import Client

    with Client(dsn, pool_size=1) as client:
        return client.create_api_key("ops", role="admin")[0]


def test_metrics_are_prometheus_text_and_follow_the_database(server, conn, dsn):
    response = httpx.get(server.url + "/metrics", headers=METRICS)
    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE
    assert value(parse(response.text), "jobqueue_jobs_submitted_total") == 0

    for _ in range(3):
        make_job(conn, queue="mail", priority="high")
    make_job(conn, queue="mail", job_type="send", state="dead_letter")
    samples = wait_until(
        lambda: (
            (s := parse(httpx.get(server.url + "/metrics", headers=METRICS).text))
            and value(s, "jobqueue_jobs_submitted_total") == 4
            and s
        ),
        message="a fresh collection",
    )
    assert value(samples, "jobqueue_queue_depth", queue="mail", priority="high") == 3
    assert value(samples, "jobqueue_jobs_in_dlq", queue="mail", job_type="send") == 1
    assert value(samples, "jobqueue_jobs_submitted_total") == 4

    with WorkerThread(test_app, test_settings(dsn, stats_interval=0.2)):
        conn.execute('SELECT * FROM jobqueue.enqueue_many(\'[{"job_type": "record"}, {"job_type": "record"}]\')')
        samples = wait_until(
            lambda: (
                (s := parse(httpx.get(server.url + "/metrics", headers=METRICS).text))
                and total(s, "jobqueue_jobs_processed_total") == 2
                and s
            ),
            timeout=15,
            message="the worker's attempts on /metrics",
        )
        assert value(samples, "jobqueue_worker_count") == 1


def test_the_figures_need_an_admin_key_or_the_metrics_token_and_probes_stay_public(server, dsn, admin_key):
    from jobqueue.client import Client

    with Client(dsn, pool_size=1) as client:
        producer_key = client.create_api_key("acme")[0]
    for path in ("/metrics", "/dashboard/overview"):
        assert httpx.get(server.url + path).status_code == 401
        assert httpx.get(server.url + path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        refused = httpx.get(server.url + path, headers={"Authorization": f"Bearer {producer_key}"})
        assert refused.status_code == 403 and refused.json()["error"] == "forbidden"
        assert httpx.get(server.url + path, headers={"Authorization": f"Bearer {admin_key}"}).status_code == 200
        assert httpx.get(server.url + path, headers=METRICS).status_code == 200
    for path in ("/healthz", "/readyz", "/dashboard"):
        assert httpx.get(server.url + path).status_code == 200


def test_figures_may_be_made_public_explicitly(dsn):
    api = ApiServer(api_settings(dsn, metrics_public=True)).start()
    try:
        assert httpx.get(api.url + "/metrics").status_code == 200
        assert httpx.get(api.url + "/dashboard/overview").status_code == 200
    finally:
        api.stop()


def test_dashboard_page_and_files_are_served_from_the_package(server):
    page = httpx.get(server.url + "/dashboard")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'id="jobqueue-routes"' in page.text and '"/admin/dlq"' in page.text
    script = httpx.get(server.url + "/dashboard/static/dashboard.js")
    assert script.status_code == 200 and "text/javascript" in script.headers["content-type"]
    assert "function renderChart" in script.text
    assert "text/css" in httpx.get(server.url + "/dashboard/static/dashboard.css").headers["content-type"]
    assert httpx.get(server.url + "/dashboard/static/../app.py").status_code == 404
    assert httpx.get(server.url + "/dashboard/static/nothing.js").status_code == 404


def test_the_bare_address_redirects_to_the_dashboard(server):
    """`make run` prints the API's address; typed into a browser it showed a 404 (issue 20). Only
    ``/`` itself: a path under it is still the API's, and an unknown one still a 404."""
    root = httpx.get(server.url + "/")
    assert (root.status_code, root.headers["location"]) == (302, "/dashboard")
    assert httpx.get(server.url + "/", follow_redirects=True).text == httpx.get(server.url + "/dashboard").text
    assert httpx.get(server.url + "/nowhere").status_code == 404
    assert "/" not in httpx.get(server.url + "/schema/openapi.json").json()["paths"]


def test_overview_json_has_totals_queues_and_pause_state(server, conn, admin_key):
    make_job(conn, queue="mail", priority="low")
    make_job(conn, queue="mail", job_type="send", state="dead_letter")
    paused = httpx.post(server.url + "/queues/mail/pause", headers={"Authorization": f"Bearer {admin_key}"})
    assert paused.status_code == 200, paused.text
    overview = wait_until(
        lambda: (o := httpx.get(server.url + "/dashboard/overview", headers=METRICS).json())["submitted"] == 2 and o,
        message="a fresh collection",
    )
    assert overview["depth"] == 1 and overview["dead"] == 1 and overview["submitted"] == 2
    (mail,) = [q for q in overview["queues"] if q["queue"] == "mail"]
    assert mail["paused"] is True and mail["depth_by_priority"]["low"] == 1 and mail["dead"] == 1
    assert len(overview["buckets"]) == len(overview["bounds_ms"]) + 1
    assert (
        value(parse(httpx.get(server.url + "/metrics", headers=METRICS).text), "jobqueue_queue_paused", queue="mail")
        == 1
    )


def test_rest_submit_opens_a_producer_span_under_the_callers_traceparent(dsn, conn, admin_key):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    api = ApiServer(api_settings(dsn))
    api.server.config.app.state["services"].client.tracing = tracing.Tracing(provider)
    api.start()
    try:
        response = httpx.post(
            api.url + "/jobs",
            json={"job_type": "record", "payload": {}},
            headers={"Authorization": f"Bearer {admin_key}", "traceparent": CALLER},
        )
    finally:
        api.stop()
    assert response.status_code == 201, response.text
    (span,) = exporter.get_finished_spans()
    assert span.kind.name == "PRODUCER"
    assert f"{span.context.trace_id:032x}" == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert f"{span.parent.span_id:016x}" == "00f067aa0ba902b7"
    stored = job_row(conn, response.json()["id"])["traceparent"]
    assert stored.split("-")[1:3] == [f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"]


def test_dashboard_endpoints_stay_quick_with_100k_jobs(server, conn, admin_key):
    """What the page calls with 100,000 jobs in the table: the overview, what workers run, the hour's
    history, and one page of each list (the Scheduled and Retrying tabs with none to find: the
    worst case, every row passed over)."""
    conn.execute("""INSERT INTO jobqueue.jobs (job_type, queue, priority, state, finished_at, attempts)
                    SELECT 't' || (g % 5), 'q' || (g % 3), g % 4,
                           CASE WHEN g % 20 = 0 THEN 'pending' WHEN g % 50 = 1 THEN 'dead_letter' ELSE 'completed' END,
                           CASE WHEN g % 20 = 0 THEN NULL ELSE now() END, 1
                    FROM generate_series(1, 100000) g""")
    conn.execute("VACUUM ANALYZE jobqueue.jobs")
    headers = {"Authorization": f"Bearer {admin_key}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=10) as http:
        http.get("/dashboard/overview")  # warm the pool and the plans
        timings = {}
        for name, path in (
            ("overview", "/dashboard/overview"),
            ("jobs", "/jobs?limit=50"),
            ("jobs filtered", "/jobs?limit=50&state=dead_letter&queue=q1"),
            ("dlq", "/admin/dlq?limit=50"),
            ("scheduled", "/jobs?limit=50&state=pending&scheduled=true"),
            ("retrying", "/jobs?limit=50&state=failed"),
            ("running", "/dashboard/running"),
            ("history", "/dashboard/history"),
        ):
            started = time.perf_counter()
            response = http.get(path)
            timings[name] = time.perf_counter() - started
            assert response.status_code == 200, response.text
        overview = http.get("/dashboard/overview").json()
        assert overview["depth"] == 5000 and overview["dead"] == 2000
        first = http.get("/jobs?limit=50").json()
        second = http.get(f"/jobs?limit=50&cursor={first['next_cursor']}").json()
        assert len(first["jobs"]) == len(second["jobs"]) == 50
        assert not {j["id"] for j in first["jobs"]} & {j["id"] for j in second["jobs"]}
    print(
        "dashboard calls with 100k jobs (s):",
        {k: round(v, 4) for k, v in timings.items()},
        "collection (ms):",
        overview["collect_ms"],
    )
    assert max(timings.values()) < 1.0, timings


def test_metrics_queues_and_the_overview_list_the_largest_queues_and_fold_the_rest(server, conn, admin_key):
    """Issue 18: three batches on new queue names grew /metrics from 49 KB to 23.7 MB (90,512 series)
    and /queues to 1.7 MB. Each lists every declared queue (a live worker serves it, an admin
    configured it) and the JOBQUEUE_METRICS_MAX_QUEUES (50) largest others; the rest are summed
    into queue="(other)", so every total still adds up."""
    conn.execute("""INSERT INTO jobqueue.jobs (job_type, queue, priority, state, run_at, attempts)
                    SELECT 't' || (g % 7), 'spam-' || (g % 300), g % 4,
                           CASE WHEN g % 10 = 0 THEN 'dead_letter' ELSE 'pending' END,
                           now() + CASE WHEN g % 3 = 0 THEN interval '1 day' ELSE interval '0' END, 0
                    FROM generate_series(1, 3000) g""")
    conn.execute("INSERT INTO jobqueue.jobs (job_type, queue) SELECT 'x', 'big' FROM generate_series(1, 40)")
    conn.execute("INSERT INTO jobqueue.queue_settings (queue, paused) VALUES ('quiet', true)")
    conn.execute(
        "INSERT INTO jobqueue.workers (id, host, pid, queues, concurrency) VALUES ('w1', 'h', 1, '{served}', 1)"
    )
    headers = {"Authorization": f"Bearer {admin_key}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=10) as http:
        text = http.get("/metrics").text
        queues = http.get("/queues").json()
        overview = http.get("/dashboard/overview").json()
    samples = parse(text)
    named = {dict(labels)["queue"] for (name, labels) in samples if "queue" in dict(labels)}
    assert {"big", "served", "quiet", "(other)"} <= named and len(named) == 50 + 3  # the declared ones, and other
    assert total(samples, "jobqueue_queue_depth") == 40 + 1800  # 2,700 pending, a third of them tomorrow
    assert total(samples, "jobqueue_jobs_scheduled") == 900
    assert total(samples, "jobqueue_jobs_in_dlq") == 300
    dead_pairs = {labels for (name, labels) in samples if name == "jobqueue_jobs_in_dlq"}
    assert len(dead_pairs) <= 50 + 50 + 1
    assert len(text) < 200_000, len(text)
    listed = [q["queue"] for q in queues["queues"]]
    assert len(listed) == 52 and {"big", "quiet"} <= set(listed) and "(other)" not in listed
    other = queues["other"]
    assert other["queues"] == 300 - 49 and other["dead"] + sum(q["dead"] for q in queues["queues"]) == 300
    assert other["depth"] + sum(q["depth"] for q in queues["queues"]) == 1840
    rows = overview["queues"]
    assert len(rows) == 53 and rows[-1]["queue"] == "(other)" and rows[-1]["other_queues"] == 300 - 49
    assert overview["depth"] == 1840
