"""Input edge cases through SQL and Python (migration 0017): the same refusal, field and message on
both, and nothing written. REST's side is tests/integration/api/test_input_limits_api.py."""

from __future__ import annotations

import json
import secrets
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from jobqueue import Client, ValidationError
from tests.support.factories import count_jobs, job_row

#: 10,000 characters that do not compress: before 0017 this was "index row requires … bytes".
HUGE = secrets.token_hex(5000)


def nothing_written(conn) -> bool:
    return count_jobs(conn) == 0 and conn.execute("SELECT count(*) FROM jobqueue.idempotency_keys").fetchone()[0] == 0


def sql_refusal(conn, call: str, *params) -> tuple[str, str]:
    with pytest.raises(psycopg.errors.InvalidParameterValue) as info:
        conn.execute(call, params)
    field = info.value.diag.column_name
    return field, info.value.diag.message_primary.removeprefix(f"jobqueue: {field}: ")


def python_refusal(client: Client, **kwargs) -> tuple[str, str]:
    with pytest.raises(ValidationError) as info:
        if "jobs" in kwargs:
            client.enqueue_many(kwargs["jobs"])
        else:
            client.enqueue(**kwargs)
    return info.value.field, info.value.message


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("job_type", HUGE, "must be at most 255 characters (got 10000)"),
        ("queue", HUGE, "must be at most 255 characters (got 10000)"),
        ("job_type", "é" * 256, "must be at most 255 characters (got 256)"),  # characters, not bytes
        ("queue", " \t\n\r", "must be a non-empty string"),  # blank means the same whitespace in both
        ("idempotency_key", "k" * 256, "must be at most 255 characters (got 256)"),
        ("producer_id", "p" * 201, "must be at most 200 characters (got 201)"),
    ],
    ids=[
        "huge-job_type",
        "huge-queue",
        "multibyte-job_type",
        "blank-queue",
        "long-idempotency_key",
        "long-producer_id",
    ],
)  # fixed ids: HUGE is random, and pytest-xdist needs every worker to collect the same
def test_names_over_their_limit_get_the_same_answer_from_sql_and_python(dsn, conn, field, value, message):
    fields = {"job_type": "x", field: value}
    call = "SELECT jobqueue.enqueue(%s, queue => %s, idempotency_key => %s, producer_id => %s)"
    params = (
        fields["job_type"],
        fields.get("queue", "default"),
        fields.get("idempotency_key"),
        fields.get("producer_id"),
    )
    assert sql_refusal(conn, call, *params) == (field, message)
    bulk = json.dumps([{"job_type": "a"}] * 3 + [fields])
    assert sql_refusal(conn, "SELECT * FROM jobqueue.enqueue_many(%s)", bulk) == (f"jobs[3].{field}", message)
    with Client(dsn) as client:
        assert python_refusal(client, **fields) == (field, message)
        assert python_refusal(client, jobs=[{"job_type": "a"}] * 3 + [fields]) == (f"jobs[3].{field}", message)
    assert nothing_written(conn)


def test_times_more_than_ten_years_out_are_refused_on_every_path_and_listings_keep_working(dsn, conn):
    """A run_at of 'infinity' or in year 9999 (10000 in UTC) was stored, and from then on every
    listing that met the row failed: Python's datetime ends at year 9999 (migration 0022)."""
    far = datetime(9999, 12, 31, 23, 59, tzinfo=timezone(-timedelta(hours=14)))
    for call, params, field in (
        ("SELECT jobqueue.enqueue('x', run_at => 'infinity')", (), "run_at"),
        ("SELECT jobqueue.enqueue('x', run_at => %s)", (far,), "run_at"),
        ("SELECT jobqueue.enqueue('x', run_at => now() + interval '3651 days')", (), "run_at"),
        ("SELECT jobqueue.enqueue('x', delay => interval '9000 years')", (), "delay"),
        ("SELECT jobqueue.enqueue('x', expires_at => 'infinity')", (), "expires_at"),
        (
            "SELECT jobqueue.enqueue('x', delay => '1 day', expires_at => now() + interval '3652 days')",
            (),
            "expires_at",
        ),
        (
            "SELECT * FROM jobqueue.enqueue_many(%s)",
            (json.dumps([{"job_type": "a"}, {"job_type": "b", "run_at": "infinity"}]),),
            "jobs[1].run_at",
        ),
    ):
        found, message = sql_refusal(conn, call, *params)
        assert found == field and "must be at most 3650 days" in message, (call, found, message)
    now = datetime.now(timezone.utc)
    with Client(dsn) as client:
        for fields, field in (
            ({"run_at": far}, "run_at"),
            ({"run_at": now + timedelta(days=3651)}, "run_at"),
            ({"expires_at": now + timedelta(days=3651)}, "expires_at"),
            ({"run_at": now + timedelta(days=10), "expires_at": now + timedelta(days=3661)}, "expires_at"),
        ):
            found, message = python_refusal(client, job_type="x", **fields)
            assert found == field and message.startswith("must be at most 3650 days"), (fields, found, message)
        assert python_refusal(client, jobs=[{"job_type": "a", "run_at": far}])[0] == "jobs[0].run_at"
        assert nothing_written(conn)
        # the longest allowed still enqueue, and a listing reads them
        client.enqueue("x", run_at=now + timedelta(days=3649), expires_at=now + timedelta(days=7298))
        conn.execute("SELECT jobqueue.enqueue('x', delay => interval '3650 days')")
        assert len(client.list_jobs().jobs) == 2


def test_names_at_the_limit_are_accepted_everywhere(dsn, conn):
    longest = "ü" * 255
    conn.execute(
        "SELECT jobqueue.enqueue(%s, queue => %s, idempotency_key => %s, producer_id => %s)",
        (longest, longest, "k" * 255, "p" * 200),
    )
    with Client(dsn) as client:
        client.enqueue(longest, queue=longest, idempotency_key="j" * 255, producer_id="p" * 200)
        client.enqueue_many([{"job_type": longest, "queue": longest}])
    assert count_jobs(conn, longest) == 3


def test_a_run_at_in_the_past_means_now_on_every_path(dsn, conn):
    """A 1970 run_at used to sort before every waiting job and make the queue look 56 years late."""
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    ids = [
        conn.execute("SELECT jobqueue.enqueue('x', run_at => %s, expire_after => '1 hour')", (epoch,)).fetchone()[0],
        conn.execute("SELECT jobqueue.enqueue('x', run_at => %s, idempotency_key => 'k')", (epoch,)).fetchone()[0],
        conn.execute(
            'SELECT id FROM jobqueue.enqueue_many(\'[{"job_type": "x", "run_at": "1970-01-01T00:00:00Z"}]\')'
        ).fetchone()[0],
    ]
    with Client(dsn) as client:
        ids.append(client.enqueue("x", run_at=epoch))
        ids += client.enqueue_many([{"job_type": "x", "run_at": epoch}])
    rows = [job_row(conn, job_id) for job_id in ids]
    assert all(row["run_at"] == row["created_at"] for row in rows)  # the enqueue's own now()
    assert rows[0]["expires_at"] == rows[0]["created_at"] + timedelta(hours=1)  # counted from now, not 1970
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    assert (
        job_row(conn, conn.execute("SELECT jobqueue.enqueue('x', run_at => %s)", (later,)).fetchone()[0])["run_at"]
        == later
    )
    # An expiry before now is refused like one before a future run_at: the job could never run.
    assert (
        sql_refusal(
            conn, "SELECT jobqueue.enqueue('x', run_at => %s, expires_at => %s)", epoch, epoch + timedelta(days=1)
        )[0]
        == "expires_at"
    )


@pytest.mark.parametrize("value", ["2030-01-31 09:00", "2030-01-31T09:00:00.5", "2030-01-31"])
def test_enqueue_many_refuses_a_time_without_offset_naming_it(dsn, conn, value):
    for field in ("run_at", "expires_at"):
        bulk = json.dumps([{"job_type": "a"}, {"job_type": "b", field: value}])
        found, message = sql_refusal(conn, "SELECT * FROM jobqueue.enqueue_many(%s)", bulk)
        assert found == f"jobs[1].{field}" and message.startswith("must be a timestamp with a UTC offset")
    assert nothing_written(conn)


@pytest.mark.parametrize(
    "value",
    ["2030-01-31T09:00:00Z", "2030-01-31 10:00:00+01", "2030-01-31T10:00:00.25+0100", "2030-01-31T10:09:21+01:09:21"],
)
def test_enqueue_many_takes_times_with_an_offset(conn, value):
    (job_id,) = conn.execute(
        "SELECT id FROM jobqueue.enqueue_many(%s)", (json.dumps([{"job_type": "a", "run_at": value}]),)
    ).fetchone()
    assert job_row(conn, job_id)["run_at"].astimezone(timezone.utc).replace(microsecond=0) == datetime(
        2030, 1, 31, 9, 0, tzinfo=timezone.utc
    )


def test_a_zone_less_literal_for_a_typed_run_at_is_read_in_the_session_time_zone(conn):
    """Documented, not refused: PostgreSQL turns the literal into a timestamptz before enqueue() runs."""
    conn.execute("SET TimeZone = 'Asia/Tokyo'")
    job_id = conn.execute("SELECT jobqueue.enqueue('x', run_at => '2030-01-31 18:00')").fetchone()[0]
    assert job_row(conn, job_id)["run_at"] == datetime(2030, 1, 31, 9, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "jobs, field, message",
    [
        ([{"job_type": "a"}, 7], "jobs[1]", "must be a JSON object (got number)"),
        (
            [{"job_type": "a"}, {"job_type": "b", "delay": "5 s", "run_at": "2030-01-31T09:00:00Z"}],
            "jobs[1].run_at",
            "give run_at or delay, not both",
        ),
        (
            [{"job_type": "a"}, {"job_type": "b"}, {"job_type": "c", "timeout": "soon"}],
            "jobs[2].timeout",
            "must be an interval (got 'soon')",
        ),
    ],
)
def test_enqueue_many_errors_name_the_element_and_field(dsn, conn, jobs, field, message):
    assert sql_refusal(conn, "SELECT * FROM jobqueue.enqueue_many(%s)", json.dumps(jobs)) == (field, message)
    if field != "jobs[2].timeout":  # Python takes timeouts as seconds or a timedelta, and says so
        with Client(dsn) as client, pytest.raises(ValidationError) as info:
            client.enqueue_many(jobs)
        assert info.value.field == field
    assert nothing_written(conn)
