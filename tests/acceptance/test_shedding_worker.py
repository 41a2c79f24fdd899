"""Load shedding with a real `jobqueue-worker` process: its failures go through the same batched
ack as in production, and the shed decision is taken by the database when they are written."""

from __future__ import annotations

from jobqueue.client import Client
from tests.support.factories import job_row
from tests.support.waiting import wait_until
from tests.support.workers import spawn_worker, terminate


def test_low_retries_are_shed_only_above_the_soft_limit_of_queues_that_opt_in(dsn, conn, tmp_path):
    gate = tmp_path / "gate"
    queues = {"over": dict(shed=True, soft=5), "under": dict(shed=True, soft=100), "off": dict(shed=False, soft=5)}
    worker = spawn_worker(dsn, "tests.support.apps:queue", "--queues", ",".join(queues), "--concurrency", "4")
    try:
        with Client(dsn, pool_size=1) as client:
            for name, setup in queues.items():
                client.set_queue_limits(name, soft_limit=setup["soft"], hard_limit=None)
                client.set_queue_shedding(name, setup["shed"])
            gated = {
                name: client.enqueue("gated_flaky", {"gate": str(gate)}, queue=name, priority="low") for name in queues
            }
            normal = client.enqueue("gated_flaky", {"gate": str(gate)}, queue="over", priority="normal")
            ids = [*gated.values(), normal]
            wait_until(
                lambda: all(job_row(conn, i)["state"] == "processing" for i in ids),
                timeout=30,
                message="the four gated jobs hold the worker's four slots",
            )
            # Slots full: this backlog stays runnable while the gated jobs fail. 40 > 5, 40 < 100.
            for name in queues:
                client.enqueue_many([{"job_type": "record", "queue": name} for _ in range(40)])
            gate.touch()
            wait_until(
                lambda: all(job_row(conn, i)["state"] in ("completed", "dead_letter") for i in ids),
                timeout=30,
                message="every gated job finished",
            )
        shed = job_row(conn, gated["over"])
        assert (shed["state"], shed["dead_reason"], shed["attempts"]) == ("dead_letter", "shed", 1)
        assert conn.execute(
            "SELECT error_type FROM jobqueue.job_errors WHERE job_id = %s", (shed["id"],)
        ).fetchall() == [("TimeoutError",)]
        for retried in (normal, gated["under"], gated["off"]):
            row = job_row(conn, retried)
            assert (row["state"], row["attempts"], row["dead_reason"]) == ("completed", 2, None), row["queue"]
        wait_until(
            lambda: conn.execute("SELECT count(*) FROM jobqueue.jobs WHERE state <> 'completed'").fetchone()[0] == 1,
            timeout=30,
            message="the backlog drained",
        )
    finally:
        output = terminate(worker)
    assert conn.execute("SELECT sum(shed) FROM jobqueue.worker_stats").fetchone()[0] == 1, output
