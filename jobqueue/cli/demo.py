"""`jobqueue demo`: enqueue a handful of demo jobs and print each one's state until all are final.

Used by `make run` to show a worker doing its job; it needs a worker on `jobqueue.demo:queue`.
"""

from __future__ import annotations

import time

from jobqueue.cli.oneshot import open_client
from jobqueue.config import Settings
from jobqueue.model.jobs import JobState

FINAL = {JobState.COMPLETED, JobState.DEAD_LETTER, JobState.CANCELLED}


def demo_jobs(count: int) -> list[dict]:
    jobs = [
        {"job_type": "echo", "payload": {"hello": "world"}, "priority": "high"},
        {"job_type": "flaky", "payload": {"failures": 1}},
        {"job_type": "sleep", "payload": {"seconds": 0.5}, "priority": "low"},
        {"job_type": "fail_permanent", "payload": {"why": "shows the dead-letter queue"}},
    ]
    jobs += [{"job_type": "noop", "payload": {"n": i}} for i in range(count)]
    return jobs


def run_demo(settings: Settings, *, count: int = 5, timeout: float = 30.0) -> int:
    with open_client(settings, producer_id="demo") as client:
        ids = client.enqueue_many(demo_jobs(count))
        print(f"enqueued {len(ids)} demo jobs; waiting for the worker…")
        deadline = time.monotonic() + timeout
        while True:
            infos = [client.get(job_id) for job_id in ids]
            if all(info.state in FINAL for info in infos) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    for info in infos:
        detail = (
            info.result if info.state == JobState.COMPLETED else (info.last_error.message if info.last_error else "")
        )
        print(f"{info.id}  {info.job_type:<15} {info.state.value:<12} attempts={info.attempts}  {detail}")
    unfinished = [info for info in infos if info.state not in FINAL]
    if unfinished:
        print(f"{len(unfinished)} jobs did not finish within {timeout} s — is a worker running?")
        return 1
    return 0
