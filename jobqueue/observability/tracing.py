"""OpenTelemetry traces from producer to worker, joined by the job's stored ``traceparent``.

- Enqueue (Python client, and REST through it) opens a PRODUCER span ``send <job_type>`` and
  stores its W3C ``traceparent`` with the job; a ``traceparent`` the caller passes (an HTTP
  request's, or one given in SQL) becomes that span's parent. SQL callers that pass
  ``traceparent =>`` themselves get it stored as is.
- The worker runs each job inside a CONSUMER span ``process <job_type>``, a child of the stored
  ``traceparent``, with the job id, type, queue, attempt and outcome as attributes; spans the
  handler opens nest under it.

Configuration is OpenTelemetry's own: tracing is on when ``OTEL_TRACES_EXPORTER`` names exporters
(``otlp``, ``console``, …; ``none`` is off) or an OTLP endpoint is set
(``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), or when the application
already installed an SDK tracer provider itself; ``OTEL_SDK_DISABLED=true`` turns it off. The
service name, resource attributes, sampler and batch settings come from the usual ``OTEL_*``
variables. Off, `from_env()` returns None and callers skip tracing with one ``is None`` test —
no span objects, no context switches on the hot path.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import os
import re
import sys
from typing import Any, Iterable, Iterator, Mapping

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from jobqueue.model.errors import ValidationError

INSTRUMENTATION_NAME = "jobqueue"
_PROPAGATOR = TraceContextTextMapPropagator()
# opentelemetry-exporter-otlp-proto-http registers "otlp_proto_http"; "otlp" is the standard name.
_EXPORTER_ALIASES = {"otlp": "otlp_proto_http"}


def _exporter_names(env: Mapping[str, str]) -> tuple[str, ...]:
    raw = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if raw:
        return tuple(name for name in (p.strip() for p in raw.split(",")) if name and name != "none")
    if env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return ("otlp",)
    return ()


def _load_exporter(name: str) -> Any:
    points = {ep.name: ep for ep in importlib.metadata.entry_points(group="opentelemetry_traces_exporter")}
    point = points.get(name) or points.get(_EXPORTER_ALIASES.get(name, ""))
    if point is None:
        raise ValueError(
            f"OTEL_TRACES_EXPORTER: no trace exporter named {name!r} is installed "
            f"(available: {', '.join(sorted(points)) or 'none'})"
        )
    return point.load()()


@functools.cache
def _installed_provider(exporters: tuple[str, ...], service_name: str) -> Any:
    """Build and install the process's SDK provider once (OpenTelemetry allows one global provider)."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service_name}))
    provider = TracerProvider(resource=resource)  # sampler from OTEL_TRACES_SAMPLER; flushed at exit
    for name in exporters:
        provider.add_span_processor(BatchSpanProcessor(_load_exporter(name)))
    trace.set_tracer_provider(provider)
    return trace.get_tracer_provider()


def _sdk_provider_installed() -> bool:
    # No SDK provider can exist before the SDK's module is imported; importing it only to find
    # that out cost every client (every one-shot command) ~40 ms.
    sdk = sys.modules.get("opentelemetry.sdk.trace")
    return sdk is not None and isinstance(trace.get_tracer_provider(), sdk.TracerProvider)


def from_env(env: Mapping[str, str] | None = None, *, service_name: str = "jobqueue") -> "Tracing | None":
    """The process's tracing, or None when tracing is off (see the module docstring)."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if _sdk_provider_installed():
        return Tracing(trace.get_tracer_provider())
    exporters = _exporter_names(env)
    if not exporters:
        return None
    return Tracing(_installed_provider(exporters, service_name))


#: A W3C trace context (https://www.w3.org/TR/trace-context/#traceparent-header) as jobqueue
#: stores it: version, trace id, parent id and flags in lowercase hex, 55 characters. SQL's
#: job_problem() applies the same rule (migration 0023), with the same messages.
TRACEPARENT_LENGTH = 55
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_TRACEPARENT_FORMAT = (
    "must be a W3C traceparent: version-traceid-parentid-flags in lowercase hex "
    "(00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01), a version other than ff, "
    "ids not all zeros"
)


def traceparent_problem(value: Any) -> str | None:
    """Why ``value`` is refused as a traceparent, or None. Refused rather than dropped (as a
    propagator would): it is stored with the job, copied into every job of a batch, and the
    caller asked for it — a 1 MB header once became 20 MB of rows. Later versions are accepted
    with version 00's 55 characters only."""
    if not isinstance(value, str):
        return f"must be a W3C traceparent string (got {type(value).__name__})"
    if len(value) != TRACEPARENT_LENGTH:
        return f"must be a W3C traceparent of {TRACEPARENT_LENGTH} characters (got {len(value)})"
    if (
        _TRACEPARENT.fullmatch(value) is None
        or value.startswith("ff")
        or value[3:35] == "0" * 32
        or value[36:52] == "0" * 16
    ):
        return _TRACEPARENT_FORMAT
    return None


def check_traceparent(value: Any, field: str = "traceparent") -> None:
    """`ValidationError` naming ``field`` when ``value`` is given and not a traceparent."""
    if value is not None and (problem := traceparent_problem(value)) is not None:
        raise ValidationError(field, problem)


def traceparent_of(span: trace.Span) -> str | None:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent")


def context_from(traceparent: str | None) -> otel_context.Context | None:
    """The remote parent a stored/received traceparent names (None: start a new trace)."""
    if not traceparent:
        return None
    return _PROPAGATOR.extract({"traceparent": traceparent})


class ProducerSpan:
    """The open producer span of one enqueue call: its traceparent goes into the job row(s)."""

    __slots__ = ("span", "traceparent")

    def __init__(self, span: trace.Span | None) -> None:
        self.span = span
        self.traceparent = traceparent_of(span) if span is not None else None

    def enqueued(self, job_ids: Iterable[Any]) -> None:
        if self.span is None:
            return
        ids = [str(job_id) for job_id in job_ids]
        if len(ids) == 1:
            self.span.set_attribute("messaging.message.id", ids[0])
            self.span.set_attribute("jobqueue.job.id", ids[0])


_NO_SPAN = ProducerSpan(None)


class Tracing:
    """Opens jobqueue's spans on one tracer provider."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(INSTRUMENTATION_NAME)

    @contextlib.contextmanager
    def producer(
        self,
        *,
        job_type: str,
        queue: str,
        parent: str | None = None,
        count: int = 1,
        carrier: dict[str, Any] | None = None,
    ) -> Iterator[ProducerSpan]:
        attributes = {
            "messaging.system": "jobqueue",
            "messaging.operation.type": "send",
            "messaging.destination.name": queue,
            "jobqueue.job.type": job_type,
            "jobqueue.queue": queue,
            "messaging.batch.message_count": count,
        }
        with self.tracer.start_as_current_span(
            f"send {job_type}", context=context_from(parent), kind=SpanKind.PRODUCER, attributes=attributes
        ) as span:
            produced = ProducerSpan(span)
            if carrier is not None:
                carrier["traceparent"] = produced.traceparent
            yield produced

    @contextlib.contextmanager
    def producer_many(self, jobs: list[Any]) -> Iterator[tuple[ProducerSpan, list[Any]]]:
        specs = [spec for spec in jobs if isinstance(spec, Mapping)]
        types = {str(spec.get("job_type")) for spec in specs}
        queues = {str(spec.get("queue") or "default") for spec in specs}
        # One caller context for the whole batch (a REST request's traceparent) is the span's
        # parent and is replaced by the span's own; jobs naming other parents keep theirs.
        parents = {spec.get("traceparent") or None for spec in specs}
        parent = parents.pop() if len(parents) == 1 else None
        with self.producer(
            job_type=types.pop() if len(types) == 1 else "batch",
            queue=queues.pop() if len(queues) == 1 else "(several)",
            count=len(jobs),
            parent=parent,
        ) as span:
            yield (
                span,
                [
                    dict(spec, traceparent=span.traceparent)
                    if isinstance(spec, Mapping) and (spec.get("traceparent") or None) in (None, parent)
                    else spec
                    for spec in jobs
                ],
            )

    @contextlib.contextmanager
    def execution(
        self, *, job_id: Any, job_type: str, queue: str, attempt: int, traceparent: str | None
    ) -> Iterator[trace.Span]:
        attributes = {
            "messaging.system": "jobqueue",
            "messaging.operation.type": "process",
            "messaging.destination.name": queue,
            "messaging.message.id": str(job_id),
            "jobqueue.job.id": str(job_id),
            "jobqueue.job.type": job_type,
            "jobqueue.queue": queue,
            "jobqueue.attempt": attempt,
        }
        with self.tracer.start_as_current_span(
            f"process {job_type}",
            context=context_from(traceparent),
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=True,
        ) as span:
            yield span

    def force_flush(self, timeout_ms: int = 5000) -> None:
        flush = getattr(self.provider, "force_flush", None)
        if flush is not None:
            flush(timeout_ms)


def set_outcome(span: trace.Span, outcome: str, error_type: str = "", message: str = "") -> None:
    """Record how the attempt ended; anything but completed/cancelled marks the span as an error."""
    span.set_attribute("jobqueue.outcome", outcome)
    if error_type:
        span.set_attribute("error.type", error_type)
    if outcome not in ("completed", "cancelled"):
        span.set_status(Status(StatusCode.ERROR, f"{error_type}: {message}" if error_type else outcome))


def producing(
    tracing: Tracing | None, job_type: Any, carrier: dict[str, Any]
) -> contextlib.AbstractContextManager[ProducerSpan]:
    """The producer span of one enqueue, whose traceparent it writes into ``carrier`` (the
    enqueue's options; a ``traceparent`` already there becomes the parent); a do-nothing context
    when tracing is off."""
    if tracing is None:
        return contextlib.nullcontext(_NO_SPAN)
    check_traceparent(carrier.get("traceparent"))  # before it becomes a parent (an invalid one would be dropped)
    return tracing.producer(
        job_type=str(job_type),
        queue=str(carrier.get("queue") or "default"),
        parent=carrier.get("traceparent"),
        carrier=carrier,
    )


def producing_many(
    tracing: Tracing | None, jobs: list[Any]
) -> contextlib.AbstractContextManager[tuple[ProducerSpan, list[Any]]]:
    """One producer span for a bulk enqueue; yields it and the jobs, each carrying its traceparent
    unless the job names its own."""
    if tracing is None:
        return contextlib.nullcontext((_NO_SPAN, jobs))
    for index, spec in enumerate(jobs):
        if isinstance(spec, Mapping):
            check_traceparent(spec.get("traceparent"), f"jobs[{index}].traceparent")
    return tracing.producer_many(jobs)
