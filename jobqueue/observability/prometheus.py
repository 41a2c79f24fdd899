"""The figures in Prometheus' text format: the fleet's (`render`, from a metrics `Snapshot`; the
API's /metrics) and one worker process's own (`render_worker`; ``jobqueue-worker --metrics-port``).

Metric names (SPEC's, in Prometheus spelling), all prefixed ``jobqueue_``:
  jobs_submitted_total                       counter  every job ever enqueued (all queues)
  jobs_processed_total{queue,job_type}       counter  attempts finished by workers, any outcome
  jobs_failed_total{queue,job_type}          counter  of those, attempts that failed (retry or dead)
  jobs_in_dlq{queue,job_type}                gauge    dead-lettered jobs
  jobs_shed_total{queue,job_type}            counter  low-priority retries dead-lettered as shed (load shedding)
  queue_depth{queue,priority}                gauge    runnable now (pending, or failed and due)
  queue_age_seconds{queue,priority}          gauge    age of the oldest runnable job (0: none)
  jobs_scheduled{queue,priority}             gauge    waiting for a future run_at (delays, retries)
  jobs_retrying{queue,priority}              gauge    in state failed (waiting for a retry)
  jobs_processing{queue,priority}            gauge    held by a worker
  processing_age_seconds{queue,priority}     gauge    how long the oldest running attempt has run
  processing_overdue_seconds{queue,priority} gauge    how far the most overdue attempt is past its deadline
  worker_processing_time_ms{queue,job_type}  histogram  handler time per attempt
  worker_utilization{worker}                 gauge    busy share of each live worker's slots
  worker_count                               gauge    live workers (heartbeat within stale_seconds)
  worker_stuck_handlers{worker}              gauge    handlers past their deadline still holding a thread
  queue_paused{queue}                        gauge    1 while the queue is paused
  jobs_unserved{queue}                       gauge    runnable jobs of types no live worker of the queue serves
  desired_workers{queue}                     gauge    workers the autoscaling rule asks for (jobqueue.model.autoscale)
  circuit_state{circuit}                     gauge    0 closed, 1 half-open, 2 open (per circuit breaker)
  circuit_failures{circuit}                  gauge    counted failures in the breaker's current window
  limit_running{scope,limit}                 gauge    jobs running under a global limit (job type or queue)
  limit_concurrency{scope,limit}             gauge    the limit's concurrency (only limits that have one)
  limit_window_starts{scope,limit}           gauge    starts within the rate limit's current window
  limit_rate{scope,limit}                    gauge    starts the rate allows per window (only limits that have one)
  metrics_collect_seconds                    gauge    how long the last collection took
"""

from __future__ import annotations

from typing import Any, Iterable

from jobqueue.model.autoscale import Rule
from jobqueue.model.jobs import Priority
from jobqueue.observability.metrics import OTHER, Snapshot, desired_workers, unserved_by_queue
from jobqueue.store.metrics import DURATION_BUCKETS_MS, TypeTotals

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: Any) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{name}="{_escape(str(value))}"' for name, value in labels.items()) + "}"


def _number(value: float | int) -> str:
    if isinstance(value, int):
        return str(value)
    if value == float("inf"):
        return "+Inf"
    return repr(float(value))


class _Text:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(
        self, name: str, kind: str, help_text: str, samples: Iterable[tuple[dict, float | int]], suffix: str = ""
    ) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            self.lines.append(f"{name}{suffix}{_labels(**labels)} {_number(value)}")

    def histogram(self, name: str, help_text: str, totals: list[TypeTotals], bounds: tuple[float, ...]) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} histogram")
        for t in totals:
            cumulative = 0
            counts = list(t.buckets) + [0] * (len(bounds) + 1 - len(t.buckets))
            for bound, count in zip(bounds, counts):
                cumulative += count
                self.lines.append(
                    f"{name}_bucket{_labels(queue=t.queue, job_type=t.job_type, le=_number(float(bound)))} {cumulative}"
                )
            cumulative += counts[len(bounds)]
            self.lines.append(f"{name}_bucket{_labels(queue=t.queue, job_type=t.job_type, le='+Inf')} {cumulative}")
            self.lines.append(
                f"{name}_sum{_labels(queue=t.queue, job_type=t.job_type)} {_number(float(t.duration_ms_sum))}"
            )
            self.lines.append(f"{name}_count{_labels(queue=t.queue, job_type=t.job_type)} {cumulative}")


def _attempt_families(text: _Text, totals: list[TypeTotals], bounds: tuple[float, ...]) -> None:
    text.family(
        "jobqueue_jobs_processed_total",
        "counter",
        "Attempts finished by workers, any outcome, as reported by the workers.",
        [(dict(queue=t.queue, job_type=t.job_type), t.processed) for t in totals],
    )
    text.family(
        "jobqueue_jobs_failed_total",
        "counter",
        "Attempts that failed (retryable error, timeout or permanent error).",
        [(dict(queue=t.queue, job_type=t.job_type), t.failed) for t in totals],
    )
    text.histogram("jobqueue_worker_processing_time_ms", "Handler time per attempt, in milliseconds.", totals, bounds)


def render_worker(
    *,
    worker_id: str,
    totals: list[TypeTotals],
    utilization: float,
    running: int,
    concurrency: int,
    stuck_handlers: int = 0,
    concurrency_target: int | None = None,
) -> str:
    """One worker process's own figures (`jobqueue-worker --metrics-port`): its attempts since it
    started, under the same names as the fleet's, plus its slots."""
    text = _Text()
    _attempt_families(text, totals, DURATION_BUCKETS_MS)
    labels = dict(worker=worker_id)
    text.family(
        "jobqueue_worker_utilization",
        "gauge",
        "Share of this worker's slots busy over its last stats interval.",
        [(labels, round(float(utilization), 4))],
    )
    text.family("jobqueue_worker_running_jobs", "gauge", "Jobs this worker is running now.", [(labels, running)])
    text.family(
        "jobqueue_worker_slots",
        "gauge",
        "Jobs this worker runs at once at most (its concurrency).",
        [(labels, concurrency)],
    )
    text.family(
        "jobqueue_worker_concurrency_target",
        "gauge",
        "Slots this worker fills now: its autoscaler's target with --concurrency MIN:MAX, else its concurrency.",
        [(labels, concurrency if concurrency_target is None else concurrency_target)],
    )
    text.family(
        "jobqueue_worker_stuck_handlers",
        "gauge",
        "Handlers past their deadline that still hold a thread.",
        [(labels, stuck_handlers)],
    )
    return "\n".join(text.lines) + "\n"


def render(snapshot: Snapshot, *, rule: Rule = Rule(), worker_bounds: tuple[int, int] = (2, 100)) -> str:
    """The fleet's figures; ``rule`` and ``worker_bounds`` (min, max workers) drive desired_workers."""
    text = _Text()
    per_priority = [(dict(queue=q.queue, priority=Priority(q.priority).label), q) for q in snapshot.queues]
    text.family(
        "jobqueue_jobs_submitted_total",
        "counter",
        "Jobs ever enqueued, all queues (the jobs.seq identity sequence).",
        [({}, snapshot.submitted)],
    )
    _attempt_families(text, snapshot.totals, snapshot.bounds)
    text.family(
        "jobqueue_jobs_in_dlq",
        "gauge",
        "Dead-lettered jobs.",
        [(dict(queue=d.queue, job_type=d.job_type), d.dead) for d in snapshot.dead],
    )
    text.family(
        "jobqueue_jobs_shed_total",
        "counter",
        "Retries of low-priority jobs dead-lettered (reason shed) because their queue was above its soft limit.",
        [(dict(queue=t.queue, job_type=t.job_type), t.shed) for t in snapshot.totals],
    )
    text.family(
        "jobqueue_queue_depth",
        "gauge",
        "Jobs runnable now (pending, or failed and due for their retry).",
        [(labels, q.runnable) for labels, q in per_priority],
    )
    text.family(
        "jobqueue_queue_age_seconds",
        "gauge",
        "Age of the oldest runnable job, by its run_at (0: none).",
        [(labels, round(q.oldest_age_seconds, 3)) for labels, q in per_priority],
    )
    text.family(
        "jobqueue_jobs_scheduled",
        "gauge",
        "Jobs waiting for a future run_at (delayed, or a retry not yet due).",
        [(labels, q.scheduled) for labels, q in per_priority],
    )
    text.family(
        "jobqueue_jobs_retrying",
        "gauge",
        "Jobs in state failed, waiting for their retry.",
        [(labels, q.retrying) for labels, q in per_priority],
    )
    text.family(
        "jobqueue_jobs_processing",
        "gauge",
        "Jobs held by a worker.",
        [(labels, q.processing) for labels, q in per_priority],
    )
    text.family(
        "jobqueue_processing_age_seconds",
        "gauge",
        "How long the oldest running attempt has run (0: none).",
        [(labels, round(q.processing_age_seconds, 3)) for labels, q in per_priority],
    )
    text.family(
        "jobqueue_processing_overdue_seconds",
        "gauge",
        "How far the most overdue running attempt is past its deadline (0: none is).",
        [(labels, round(q.overdue_seconds, 3)) for labels, q in per_priority],
    )
    known_queues = sorted(({q.queue for q in snapshot.queues} - {OTHER}) | set(snapshot.paused))
    text.family(
        "jobqueue_queue_paused",
        "gauge",
        "1 while the queue is paused (workers do not claim from it).",
        [(dict(queue=name), int(name in snapshot.paused)) for name in known_queues],
    )
    text.family(
        "jobqueue_jobs_unserved",
        "gauge",
        "Runnable jobs whose job type no live worker of the queue has a handler for: nobody claims them.",
        [(dict(queue=name), n) for name, n in sorted(unserved_by_queue(snapshot).items())],
    )
    text.family(
        "jobqueue_desired_workers",
        "gauge",
        "Workers the autoscaling rule asks for per queue: the live ones serving it, one step up (depth per "
        "worker > 100 or utilization > 0.9) or down (both < 10 and < 0.2), within the bounds.",
        [
            (dict(queue=queue), n)
            for queue, n in desired_workers(snapshot, rule=rule, low=worker_bounds[0], high=worker_bounds[1]).items()
        ],
    )
    text.family(
        "jobqueue_circuit_state",
        "gauge",
        "Circuit breaker state: 0 closed, 1 half-open (one probe job runs), 2 open (its job types wait).",
        [(dict(circuit=c.name), c.state_value) for c in snapshot.circuits],
    )
    text.family(
        "jobqueue_circuit_failures",
        "gauge",
        "Failures counted toward the circuit breaker's threshold in its current window.",
        [(dict(circuit=c.name), c.failures) for c in snapshot.circuits],
    )
    text.family(
        "jobqueue_limit_running",
        "gauge",
        "Jobs running under the global limit (its slots in use).",
        [(dict(scope=lim.scope, limit=lim.name), lim.running) for lim in snapshot.limits],
    )
    text.family(
        "jobqueue_limit_concurrency",
        "gauge",
        "The global limit's concurrency: jobs it lets run at once.",
        [
            (dict(scope=lim.scope, limit=lim.name), lim.concurrency)
            for lim in snapshot.limits
            if lim.concurrency is not None
        ],
    )
    text.family(
        "jobqueue_limit_window_starts",
        "gauge",
        "Starts within the rate limit's current window.",
        [(dict(scope=lim.scope, limit=lim.name), lim.window_starts) for lim in snapshot.limits if lim.rate is not None],
    )
    text.family(
        "jobqueue_limit_rate",
        "gauge",
        "Starts the rate limit allows per window (of period_seconds).",
        [(dict(scope=lim.scope, limit=lim.name), lim.rate) for lim in snapshot.limits if lim.rate is not None],
    )
    live = snapshot.live_workers
    text.family(
        "jobqueue_worker_utilization",
        "gauge",
        "Share of a live worker's slots busy over its last stats interval (0..1).",
        [(dict(worker=w.id), round(float(w.utilization), 4)) for w in live],
    )
    text.family(
        "jobqueue_worker_count", "gauge", "Live workers (running or stopping, heartbeat recent).", [({}, len(live))]
    )
    text.family(
        "jobqueue_worker_stuck_handlers",
        "gauge",
        "Handlers past their deadline that still hold a thread, per live worker.",
        [(dict(worker=w.id), w.stuck_handlers) for w in live],
    )
    text.family(
        "jobqueue_metrics_collect_seconds",
        "gauge",
        "Time the last collection from the database took.",
        [({}, round(snapshot.collect_seconds, 6))],
    )
    return "\n".join(text.lines) + "\n"
