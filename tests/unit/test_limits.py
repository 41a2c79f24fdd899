"""Limits without a database: parsing what users write, and how one limited claim is split."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest

from jobqueue.app import JobQueue
from jobqueue.model.errors import ValidationError
from jobqueue.model.jobs import Job
from jobqueue.model.limits import Allowance, LimitSpec, format_rate, parse_rate
from jobqueue.worker.limit_plan import RECHECK, LimitPlan


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("10/s", (10, 1.0)),
        ("100/m", (100, 60.0)),
        ("5/2s", (5, 2.0)),
        ("1000/h", (1000, 3600.0)),
        (" 3 / 0.5 sec ", (3, 0.5)),
        ((7, 30), (7, 30.0)),
    ],
)
def test_rates_read_as_starts_per_period(text, parsed):
    assert parse_rate(text) == parsed


@pytest.mark.parametrize(
    "text", ["10", "10/", "ten/s", "10/d", "-1/s", "0/s", "10001/s", "5/0s", "1/86401s", (True, 1), (1, 0), 10, None]
)
def test_bad_rates_name_the_field(text):
    with pytest.raises(ValidationError) as refused:
        parse_rate(text)
    assert refused.value.field == "rate"


def test_a_task_with_a_bad_limit_is_refused_at_import_and_registers_nothing():
    app = JobQueue()
    for kwargs in ({"concurrency": 0}, {"concurrency": -3}, {"concurrency": 1.5}, {"rate": "fast"}):
        with pytest.raises(ValidationError):
            app.task("api", **kwargs)
    with pytest.raises(ValidationError):
        app.queue_limit("exports")
    assert app.tasks == {} and app.limits() == []
    app.task("api", concurrency=2, rate="10/s")(lambda job: None)
    app.queue_limit("exports", rate="5/m")
    assert app.limits() == [LimitSpec("job_type", "api", 2, 10, 1.0), LimitSpec("queue", "exports", None, 5, 60.0)]
    assert format_rate(10, 1.0) == "10/s" and format_rate(5, 60.0) == "5/m" and format_rate(5, 2.0) == "5/2s"


@pytest.mark.parametrize(
    "name, says",
    [
        ("t" * 256, "must be at most 255 characters (got 256)"),
        (" \t", "must be a non-empty string"),
        (7, "must be a non-empty string"),
    ],
)
def test_a_limit_on_a_name_no_job_could_have_is_refused_naming_it(name, says):
    """Limits were held to non-blank only: a 300-character name was stored (CLI and REST) though no
    job could ever carry it."""
    for scope in ("job_type", "queue"):
        with pytest.raises(ValidationError) as refused:
            LimitSpec.build(scope, name, concurrency=1)
        assert (refused.value.field, str(refused.value.message)) == ("name", says)
    assert LimitSpec.build("queue", "q" * 255, concurrency=1).name == "q" * 255


def job(job_type: str, queue: str = "default") -> Job:
    return Job(
        id=uuid.uuid4(),
        queue=queue,
        job_type=job_type,
        payload={},
        priority=2,
        attempt=1,
        max_attempts=3,
        traceparent=None,
        cancel_requested=False,
        created_at=datetime.now(timezone.utc),
    )


def test_the_plan_claims_the_others_then_each_limited_type_up_to_its_room():
    plan = LimitPlan(
        [Allowance("job_type", "api", 2, None), Allowance("job_type", "spent", 0, 0.4)],
        ["default"],
        free=10,
        blocked=["open_circuit"],
    )
    assert plan.groups() == [(["default"], None)] and plan.budget(None) == 10
    assert plan.rest_blocked(10) == ["open_circuit", "api", "spent"] and not plan.rest_marks(None, 10)
    assert plan.typed(2) == ["spent"] and plan.rest_marks(None, 2)  # room for the whole claim: not on its own
    assert plan.typed_room("api", 10) == 2 and plan.typed_room("api", 1) == 1 and plan.typed_room("spent", 10) == 0
    plan.took([job("api"), job("api")], None)
    assert plan.typed_room("api", 10) == 0 and plan.remaining == 8
    plan.took([job("other")] * 3, None)
    plan.took([job("other")], None, sign=-1)  # given back
    assert plan.remaining == 6 and plan.started == {("job_type", "api"): 2, ("job_type", "spent"): 0}
    assert plan.recheck_in() == RECHECK  # min(RECHECK, the rate's 0.4 s)
    assert plan.holds_slot(job("api")) and not plan.holds_slot(job("other"))


def test_limited_types_look_no_further_than_the_others_claim_reached():
    others = [job("other"), job("other")]
    others[0].priority, others[1].priority = 1, 2
    others[1].order_key = ("2030-01-01", 7)
    assert LimitPlan.horizon(others, 2) == (2, ("2030-01-01", 7))  # full: up to its last job
    assert LimitPlan.horizon(others, 5) == (3, None)  # short: it scanned everything
    assert LimitPlan.horizon([], 0) == (3, None)


def test_a_limited_queue_is_claimed_alone_within_its_room_and_a_spent_one_not_at_all():
    plan = LimitPlan(
        [
            Allowance("queue", "exports", 1, None),
            Allowance("queue", "full", 0, None),
            Allowance("job_type", "api", 5, None),
        ],
        ["exports", "full", "default"],
        free=4,
    )
    assert plan.groups() == [(["exports"], "exports"), (["default"], None)]
    assert plan.budget("exports") == 1 and plan.typed_room("api", plan.budget("exports")) == 1
    plan.took([job("api", "exports")], "exports")
    assert plan.budget("exports") == 0 and plan.budget(None) == 3 and plan.typed_room("api", 3) == 3
    assert plan.started[("queue", "exports")] == 1 and plan.started[("job_type", "api")] == 1


def test_no_spent_limit_no_recheck():
    assert LimitPlan([Allowance("job_type", "api", 5, None)], ["default"], free=2).recheck_in() is None
