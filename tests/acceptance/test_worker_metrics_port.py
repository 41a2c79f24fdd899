"""`jobqueue-worker --metrics-port`: each worker process serves its own figures over HTTP."""

from __future__ import annotations

import socket

import httpx

from tests.harness.devdb import free_port
from tests.support.prometheus import parse, total, value
from tests.support.waiting import wait_until
from tests.support.workers import spawn_worker, terminate


def _scrape(url: str) -> dict | None:
    try:
        response = httpx.get(url, timeout=2)
    except httpx.TransportError:
        return None
    return parse(response.text) if response.status_code == 200 else None


def _two_free_ports() -> int:
    """A port P such that P and P + 1 are both free now."""
    while True:
        port = free_port()
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port


def test_each_worker_process_serves_its_own_metrics(conn, dsn):
    port = _two_free_ports()
    worker = spawn_worker(
        dsn,
        "tests.support.apps:queue",
        "--processes",
        "2",
        "--concurrency",
        "3",
        "--metrics-port",
        str(port),
        env={"JOBQUEUE_STATS_INTERVAL": "0.3"},
    )
    try:
        for offset in (0, 1):
            wait_until(
                lambda: _scrape(f"http://127.0.0.1:{port + offset}/metrics"),
                timeout=30,
                message=f"metrics of process {offset}",
            )
        conn.execute(
            "SELECT * FROM jobqueue.enqueue_many(%s::jsonb)",
            ("[" + ",".join(['{"job_type": "record"}'] * 40 + ['{"job_type": "permanent"}']) + "]",),
        )

        def both() -> list[dict] | None:
            scrapes = [_scrape(f"http://127.0.0.1:{port + offset}/metrics") for offset in (0, 1)]
            done = sum(total(s, "jobqueue_jobs_processed_total") for s in scrapes if s)
            return scrapes if done == 41 else None

        scrapes = wait_until(both, timeout=30, message="41 attempts over the two processes")
        assert sum(total(s, "jobqueue_jobs_failed_total", job_type="permanent") for s in scrapes) == 1
        for samples in scrapes:
            (worker_label,) = {dict(labels)["worker"] for name, labels in samples if name == "jobqueue_worker_slots"}
            assert value(samples, "jobqueue_worker_slots", worker=worker_label) == 3
            assert value(samples, "jobqueue_worker_running_jobs", worker=worker_label) is not None
        assert httpx.get(f"http://127.0.0.1:{port}/other").status_code == 404
    finally:
        output = terminate(worker)
    assert "Traceback" not in output, output
