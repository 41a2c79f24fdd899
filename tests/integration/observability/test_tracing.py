"""Traces from producer to worker: the producer span's traceparent is stored with the job and the
worker's execution span, in a real `jobqueue-worker` process, is its child."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from jobqueue import Client
from jobqueue.observability import tracing
from jobqueue.worker.spans import traced
from tests.support.factories import job_row
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[3]
REMOTE_PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _memory_tracing() -> tuple[tracing.Tracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return tracing.Tracing(provider), exporter


def _spawn_traced_worker(dsn: str) -> subprocess.Popen:
    """A real worker process whose spans go to stdout (OTEL_TRACES_EXPORTER=console); logs to stderr."""
    env = dict(
        os.environ,
        JOBQUEUE_DSN=dsn,
        OTEL_TRACES_EXPORTER="console",
        OTEL_SERVICE_NAME="worker-under-test",
        OTEL_BSP_SCHEDULE_DELAY="100",
        PYTHONUNBUFFERED="1",
    )
    command = [
        sys.executable,
        "-c",
        "import sys; from jobqueue.cli import worker_main; sys.exit(worker_main())",
        "--app",
        "tests.support.apps:queue",
        "--concurrency",
        "4",
        "--poll-interval",
        "0.5",
    ]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def _ids(traceparent: str) -> tuple[int, int]:
    _version, trace_id, span_id, _flags = traceparent.split("-")
    return int(trace_id, 16), int(span_id, 16)


def _console_spans(text: str) -> list[dict]:
    decoder, spans, index = json.JSONDecoder(), [], 0
    while (start := text.find("{", index)) != -1:
        span, index = decoder.raw_decode(text, start)
        spans.append(span)
    return spans


def test_worker_span_is_a_child_of_the_producer_span_across_processes(conn, dsn):
    producer_tracing, exporter = _memory_tracing()
    with Client(dsn) as client:
        client.tracing = producer_tracing
        job_id = client.enqueue("record", {"n": 1}, queue="default")
        dead_id = client.enqueue("permanent", {})
        batch_ids = client.enqueue_many([{"job_type": "record", "payload": {"n": i}} for i in range(3)])
    sql_id = conn.execute("SELECT jobqueue.enqueue('record', traceparent => %s)", (REMOTE_PARENT,)).fetchone()[0]

    single = next(s for s in exporter.get_finished_spans() if s.attributes.get("jobqueue.job.id") == str(job_id))
    assert single.kind.name == "PRODUCER" and single.attributes["messaging.destination.name"] == "default"
    assert _ids(job_row(conn, job_id)["traceparent"]) == (single.context.trace_id, single.context.span_id)
    batch_span = next(
        s for s in exporter.get_finished_spans() if s.attributes.get("messaging.batch.message_count") == 3
    )
    assert {_ids(job_row(conn, i)["traceparent"]) for i in batch_ids} == {
        (batch_span.context.trace_id, batch_span.context.span_id)
    }

    worker = _spawn_traced_worker(dsn)
    try:
        wait_until(
            lambda: (
                conn.execute(
                    "SELECT count(*) FROM jobqueue.jobs WHERE state IN ('completed', 'dead_letter')"
                ).fetchone()[0]
                == 6
            ),
            timeout=30,
            message="all six jobs finished",
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    spans = {s["attributes"].get("jobqueue.job.id"): s for s in _console_spans(out)}

    run = spans[str(job_id)]
    assert run["name"] == "process record" and run["kind"] == "SpanKind.CONSUMER"
    assert run["context"]["trace_id"] == f"0x{single.context.trace_id:032x}"
    assert run["parent_id"] == f"0x{single.context.span_id:016x}"
    assert run["attributes"]["jobqueue.job.type"] == "record"
    assert run["attributes"]["jobqueue.queue"] == "default"
    assert run["attributes"]["jobqueue.attempt"] == 1
    assert run["attributes"]["jobqueue.outcome"] == "completed"
    assert run["resource"]["attributes"]["service.name"] == "worker-under-test"

    dead = spans[str(dead_id)]
    assert dead["attributes"]["jobqueue.outcome"] == "dead" and dead["status"]["status_code"] == "ERROR"
    assert dead["attributes"]["error.type"] == "PermanentError"

    for batch_id in batch_ids:
        assert spans[str(batch_id)]["parent_id"] == f"0x{batch_span.context.span_id:016x}"

    from_sql = spans[str(sql_id)]
    assert from_sql["context"]["trace_id"] == "0x0af7651916cd43dd8448eb211c80319c"
    assert from_sql["parent_id"] == "0xb7ad6b7169203331"


def test_a_callers_traceparent_becomes_the_producer_spans_parent(conn, dsn):
    producer_tracing, exporter = _memory_tracing()
    with Client(dsn) as client:
        client.tracing = producer_tracing
        job_id = client.enqueue("record", traceparent=REMOTE_PARENT)
    (span,) = exporter.get_finished_spans()
    assert f"{span.context.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"
    assert f"{span.parent.span_id:016x}" == "b7ad6b7169203331"
    assert _ids(job_row(conn, job_id)["traceparent"]) == (span.context.trace_id, span.context.span_id)


@pytest.mark.parametrize(
    "env", [{}, {"OTEL_TRACES_EXPORTER": "none"}, {"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}]
)
def test_tracing_is_off_unless_configured(env, dsn):
    assert tracing.from_env(env) is None
    with Client(dsn) as client:
        assert client.tracing is None  # this test process configured nothing

    async def run():
        return "outcome"

    coroutine = run()
    assert traced(None, object(), coroutine) is coroutine  # off: the worker awaits the bare coroutine
    coroutine.close()


def test_an_unknown_exporter_is_a_clear_error():
    with pytest.raises(ValueError, match="no trace exporter named 'nope'"):
        tracing.from_env({"OTEL_TRACES_EXPORTER": "nope"})


def test_spans_opened_by_handlers_nest_under_the_execution_span(conn, dsn):
    from jobqueue import JobQueue
    from tests.support.workers import WorkerThread, test_settings

    worker_tracing, exporter = _memory_tracing()
    app = JobQueue("nesting")
    tracer = worker_tracing.provider.get_tracer("handler")

    @app.task("in_thread")
    def in_thread(job):
        with tracer.start_as_current_span("handler work (sync)"):
            return None

    @app.task("on_loop")
    async def on_loop(job):
        with tracer.start_as_current_span("handler work (async)"):
            return None

    thread = WorkerThread(app, test_settings(dsn))
    thread.worker.tracing = worker_tracing
    with thread:
        conn.execute('SELECT * FROM jobqueue.enqueue_many(\'[{"job_type": "in_thread"}, {"job_type": "on_loop"}]\')')
        wait_until(lambda: len(exporter.get_finished_spans()) == 4, timeout=15, message="four spans")
    spans = {span.name: span for span in exporter.get_finished_spans()}
    for kind, job_type in (("sync", "in_thread"), ("async", "on_loop")):
        execution, work = spans[f"process {job_type}"], spans[f"handler work ({kind})"]
        assert work.parent.span_id == execution.context.span_id
        assert work.context.trace_id == execution.context.trace_id
        assert execution.attributes["jobqueue.outcome"] == "completed"


def test_otlp_is_the_standard_exporter_name():
    """In a fresh interpreter (a provider is installed once per process)."""
    code = (
        "from jobqueue.observability import tracing; t = tracing.from_env({'OTEL_EXPORTER_OTLP_ENDPOINT': 'http://127.0.0.1:9'});"
        "print(*[type(p.span_exporter).__name__ for p in t.provider._active_span_processor._span_processors])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.stdout.split() == ["OTLPSpanExporter"], result.stderr
