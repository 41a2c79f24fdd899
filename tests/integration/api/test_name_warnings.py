"""A submission naming a queue or job type nobody ever served or declared is accepted, and told:
``warnings`` in the answer and a log line (before, ``sned_email`` to ``mial`` was a silent 201)."""

from __future__ import annotations

import logging

import pytest

from jobqueue.api import name_warnings
from jobqueue.db import gateway as db
from jobqueue.store import workers as worker_store
from tests.support.factories import count_jobs


@pytest.fixture(autouse=True)
def _no_name_cache(monkeypatch):
    monkeypatch.setattr(name_warnings, "TTL", 0.0)  # every submission reads the names: no waiting in tests


def test_a_misspelled_job_type_and_queue_are_accepted_with_warnings(http, conn, caplog):
    db.run_sync(
        conn,
        worker_store.register(
            worker_id="w1", host="h", pid=1, queues=["mail"], concurrency=1, job_types=["send_email"]
        ),
    )
    alice = http("alice")
    good = alice.post("/jobs", json={"job_type": "send_email", "queue": "mail"})
    assert good.status_code == 201 and "warnings" not in good.json()
    with caplog.at_level(logging.WARNING, logger="jobqueue.api"):
        typo = alice.post("/jobs", json={"job_type": "sned_email", "queue": "mial"})
        again = alice.post("/jobs", json={"job_type": "sned_email", "queue": "mial"})
    assert typo.status_code == 201 and count_jobs(conn, "mial") == 2  # accepted: its worker may come later
    warnings = typo.json()["warnings"]
    assert len(warnings) == 2 and "'sned_email'" in warnings[0] and "'mial'" in warnings[1]
    assert again.json()["warnings"] == warnings
    logged = [r.getMessage() for r in caplog.records if "sned_email" in r.getMessage()]
    assert len(logged) == 1 and "'alice'" in logged[0]  # logged once per process, not per request


def test_a_batch_carries_its_warnings_once(http):
    batch = http("alice").post(
        "/jobs/batch", json={"jobs": [{"job_type": "sned_email"}, {"job_type": "sned_email"}, {"job_type": "x2"}]}
    )
    assert batch.status_code == 201
    assert [w.split("'")[1] for w in batch.json()["warnings"]] == ["sned_email", "x2"]  # 'default' is known
    assert all("warnings" not in job for job in batch.json()["jobs"])
