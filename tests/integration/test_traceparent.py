"""A job's traceparent is a W3C trace context or nothing, on every path (issue 18): a 1 MB
header used to be stored as given and copied into every job of a batch (an 870-byte body stored
20.8 MB). SQL and Python refuse the same values, naming the field, and write nothing; REST's side
is in tests/integration/api/test_submit.py."""

from __future__ import annotations

import json

import psycopg
import pytest

from jobqueue import Client, ValidationError
from tests.support.factories import count_jobs, job_row

VALID = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

#: Each breaks one rule of https://www.w3.org/TR/trace-context/#traceparent-header-field-values.
INVALID = {
    "huge": "00-" + "a" * 1_000_000,
    "one-more-character": VALID + "0",
    "one-less-character": VALID[:-1],
    "empty": "",
    "upper-case": VALID.upper(),
    "not-hex": VALID.replace("0af7", "0ag7"),
    "version-ff": "ff" + VALID[2:],
    "zero-trace-id": "00-" + "0" * 32 + VALID[35:],
    "zero-parent-id": VALID[:36] + "0" * 16 + VALID[52:],
    "other-separators": VALID.replace("-", "_"),
    "spaces-around": " " + VALID[1:-1] + " ",
    "newline": VALID[:-1] + "\n",
}


def _refused_in_sql(conn, statement: str, *params) -> tuple[str, str]:
    with pytest.raises(psycopg.errors.InvalidParameterValue) as info:
        conn.execute(statement, params)
    return info.value.diag.column_name, info.value.diag.message_primary


@pytest.mark.parametrize("value", INVALID.values(), ids=INVALID.keys())
def test_an_invalid_traceparent_is_refused_by_sql_and_python_naming_the_field(dsn, conn, value):
    field, message = _refused_in_sql(conn, "SELECT jobqueue.enqueue('x', traceparent => %s)", value)
    assert field == "traceparent" and "W3C traceparent" in message, message
    assert len(message) < 300  # the value is never echoed back whole
    bulk = json.dumps([{"job_type": "a", "traceparent": VALID}, {"job_type": "b", "traceparent": value}])
    field, message = _refused_in_sql(conn, "SELECT * FROM jobqueue.enqueue_many(%s)", bulk)
    assert field == "jobs[1].traceparent" and "W3C traceparent" in message, message
    with Client(dsn) as client:
        with pytest.raises(ValidationError) as single:
            client.enqueue("x", traceparent=value)
        with pytest.raises(ValidationError) as batch:
            client.enqueue_many([{"job_type": "a"}, {"job_type": "b", "traceparent": value}])
    assert single.value.field == "traceparent" and "W3C traceparent" in single.value.message
    assert batch.value.field == "jobs[1].traceparent"
    assert count_jobs(conn) == 0


def test_a_valid_traceparent_is_stored_on_every_path(dsn, conn):
    future_version = "cc" + VALID[2:]  # a later version with version 00's fields: accepted as 00 would be
    sql_id = conn.execute("SELECT jobqueue.enqueue('x', traceparent => %s)", (VALID,)).fetchone()[0]
    bulk_id = conn.execute(
        "SELECT id FROM jobqueue.enqueue_many(%s)", (json.dumps([{"job_type": "x", "traceparent": future_version}]),)
    ).fetchone()[0]
    with Client(dsn) as client:
        python_id = client.enqueue("x", traceparent=VALID)
    assert [job_row(conn, i)["traceparent"] for i in (sql_id, bulk_id, python_id)] == [VALID, future_version, VALID]


def test_a_non_string_traceparent_is_refused_by_python(dsn, conn):
    with Client(dsn) as client, pytest.raises(ValidationError) as info:
        client.enqueue_many([{"job_type": "x", "traceparent": 42}])
    assert info.value.field == "jobs[0].traceparent"
    assert count_jobs(conn) == 0


def test_with_tracing_on_an_invalid_traceparent_is_refused_too_not_replaced(dsn, conn):
    """With OpenTelemetry on, the caller's traceparent becomes the producer span's parent and the
    span's own is stored: an invalid one must still be refused, not silently swapped for a new trace."""
    from opentelemetry.sdk.trace import TracerProvider

    from jobqueue.observability import tracing

    with Client(dsn) as client:
        client.tracing = tracing.Tracing(TracerProvider())
        with pytest.raises(ValidationError) as single:
            client.enqueue("x", traceparent=INVALID["huge"])
        with pytest.raises(ValidationError) as batch:
            client.enqueue_many([{"job_type": "x", "traceparent": INVALID["upper-case"]}] * 3)
        assert client.enqueue("x", traceparent=VALID)  # a valid one is still the span's parent
    assert (single.value.field, batch.value.field) == ("traceparent", "jobs[0].traceparent")
    assert count_jobs(conn) == 1
