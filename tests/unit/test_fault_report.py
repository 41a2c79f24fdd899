"""How the fault campaign judges a scenario (tests.harness.faults.report), on hand-made outcomes."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from tests.harness.faults.report import Fault, Run, exit_status, judge, render
from tests.harness.faults.store import JobOutcome

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def outcome(
    key: str,
    *,
    state="completed",
    runs=1,
    failing=0,
    attempts=1,
    max_attempts=3,
    result_attempt=None,
    result_outcome="completed",
    finished=1.0,
    job_type="record",
    error=None,
) -> JobOutcome:
    return JobOutcome(
        id=uuid.uuid4(),
        job_type=job_type,
        key=key,
        state=state,
        attempts=attempts,
        max_attempts=max_attempts,
        finished_at=T0 + timedelta(seconds=finished) if finished else None,
        result_outcome=result_outcome if state in ("completed", "dead_letter") else None,
        result_attempt=attempts if result_attempt is None else result_attempt,
        runs=runs,
        failing_runs=failing,
        last_error=error,
    )


def run_of(outcomes, *, expected_state="completed", faults=()) -> Run:
    return Run("s", expected={o.id: expected_state for o in outcomes}, faults=list(faults))


def test_a_clean_drain_is_ok():
    jobs = [outcome(f"k{i}") for i in range(3)]
    row = judge(run_of(jobs), jobs)
    assert (row.status, row.lost, row.duplicates, row.wrong) == ("ok", 0, 0, 0)
    assert exit_status([row]) == 0


def test_lost_jobs_say_where_they_ended_and_missing_ones_count():
    done, dead = outcome("a"), outcome("b", state="dead_letter", runs=0, error="LeaseExpired")
    run = run_of([done, dead])
    run.expected[uuid.uuid4()] = "completed"  # a producer got this id back; it is not stored
    row = judge(run, [done, dead])
    assert row.lost == 2 and row.status == "FAIL" and exit_status([row]) == 1
    assert "1 dead_letter (LeaseExpired, never ran)" in row.notes and "1 not stored" in row.notes


def test_a_second_run_is_allowed_only_when_a_fault_held_the_job():
    held, free = outcome("a", runs=2, attempts=2), outcome("b", runs=2, attempts=2)
    fault = Fault("SIGKILL worker-0", T0, held={held.id})
    row = judge(run_of([held, free], faults=[fault]), [held, free])
    assert (row.duplicates, row.allowed, row.status) == (2, 1, "FAIL")
    thrice = outcome("c", runs=3, attempts=3)  # one fault allows one more run, not two
    row = judge(run_of([thrice], faults=[Fault("SIGKILL", T0, held={thrice.id})]), [thrice])
    assert (row.duplicates, row.allowed) == (2, 1)


def test_runs_that_failed_on_purpose_are_retries_not_duplicates():
    hang = outcome(
        "hang-0",
        state="dead_letter",
        runs=2,
        failing=2,
        attempts=2,
        max_attempts=2,
        result_outcome="dead_letter",
        job_type="hang",
        error="JobTimeout",
    )
    row = judge(run_of([hang], expected_state="dead_letter"), [hang])
    assert (row.duplicates, row.status) == (0, "ok")
    assert "hang: 1 dead_letter (JobTimeout) after 2 runs" in row.notes
    rerun = outcome(
        "huge", state="dead_letter", runs=4, attempts=4, max_attempts=4, result_outcome="dead_letter", job_type="huge"
    )  # returned normally, yet ran four times
    assert judge(run_of([rerun], expected_state="dead_letter"), [rerun]).duplicates == 3


def test_two_jobs_for_one_idempotency_key_are_one_job_run_twice():
    first, second = outcome("p1"), outcome("p1")
    row = judge(run_of([first, second]), [first, second])
    assert (row.duplicates, row.allowed, row.status) == (1, 0, "FAIL")
    assert "1 jobs stored twice for one idempotency key" in row.notes


def test_wrong_end_states_fail_the_scenario():
    stale = outcome("a", attempts=2, runs=2, result_attempt=1)  # a late ack's result kept
    ghost = outcome("b", runs=0)
    dead_done = outcome("c", state="dead_letter", result_outcome="completed")
    jobs = [stale, ghost, dead_done]
    row = judge(
        Run(
            "s",
            expected={stale.id: "completed", ghost.id: "completed", dead_done.id: "dead_letter"},
            faults=[Fault("SIGSTOP", T0, held={stale.id})],
        ),
        jobs,
    )
    assert row.wrong == 3 and row.status == "FAIL"
    assert "result of a stale attempt" in row.notes and "completed without a run" in row.notes


def test_recovery_is_the_slowest_fault_until_what_it_held_finished():
    a, b, c = outcome("a", finished=4.0), outcome("b", finished=9.5), outcome("c", finished=12.0)
    faults = [
        Fault("f1", T0 + timedelta(seconds=1), held={a.id, b.id}),
        Fault("f2", T0 + timedelta(seconds=10)),
    ]  # held nothing: until the next job finished
    row = judge(run_of([a, b, c], faults=faults), [a, b, c])
    assert row.recovery == 8.5 and "recovery 2.0-8.5 s" in row.notes
    producer = Fault("stop", T0, producers=True)  # producers never got an answer again
    assert judge(run_of([a], faults=[producer]), [a]).recovery is None


def test_wedged_failures_and_too_few_faults_are_reported():
    jobs = [outcome("a")]
    run = run_of(jobs)
    run.wedged = "no job finished for 30 s with 5 still live"
    run.failures.append("SIGTERM ignored by worker-0")
    row = judge(run, jobs)
    assert row.status == "WEDGED" and "SIGTERM ignored" in row.notes and "wedged:" in row.notes
    quiet = run_of(jobs)
    quiet.min_faults = 1
    assert judge(quiet, jobs).status == "FAIL"
    refused = run_of([outcome("nul")])
    refused.refused_keys.add("nul")
    assert "stored although refused: nul" in judge(refused, [outcome("nul")]).notes


def test_the_table_has_one_line_per_scenario():
    jobs = [outcome("a")]
    text = render([judge(run_of(jobs), jobs)], header="machine")
    assert text.splitlines()[0] == "machine" and len(text.splitlines()) == 4
    assert "duplicates (allowed)" in text and "0 (0)" in text
