"""How long names and keys may be, and what counts as blank: the rules `jobqueue.job_problem()` in
SQL applies (migration 0017), kept here so that Python and REST refuse the same input with the
same field and message before anything reaches the database.

Why limits at all: queue names and job types are in several btree indexes and in every NOTIFY; a
name of 10,000 characters used to end as PostgreSQL's own "index row requires 12832 bytes" or
"payload string too long" (or, compressible, was stored and slowed every index holding it).
255 characters are at most 1,020 bytes in UTF-8, so two names fit a btree entry with room to spare.
"""

from __future__ import annotations

from typing import Any

#: The longest job type and queue name, in characters (as PostgreSQL's length() counts them).
MAX_NAME_LENGTH = 255
#: The longest idempotency key.
MAX_IDEMPOTENCY_KEY_LENGTH = 255
#: Ordering keys: as long as idempotency keys (jobqueue.ordering_key_problem checks the same).
MAX_ORDERING_KEY_LENGTH = 255
#: The longest producer id (an API key's producer has the same bound).
MAX_PRODUCER_ID_LENGTH = 200
#: The largest payload, in bytes as stored (jsonb, ``pg_column_size``): the database refuses a
#: bigger one on every path (migration 0023; the JSON text of a payload is about as long). Not
#: checked in Python: only the database measures the stored size.
MAX_PAYLOAD_BYTES = 1_048_576
#: The most jobs one ``enqueue_many()`` takes (migration 0023); ``JOBQUEUE_API_MAX_BATCH`` may not exceed it.
MAX_BATCH_JOBS = 10_000
#: What a blank name consists of: SQL's btrim(name, E' \t\n\r\f\v') strips exactly these.
BLANK = " \t\n\r\f\v"


def name_problem(name: Any, longest: int = MAX_NAME_LENGTH) -> str | None:
    """Why ``name`` is refused as a job type or queue name, or None when it is fine."""
    if not isinstance(name, str) or not name.strip(BLANK):
        return "must be a non-empty string"
    if len(name) > longest:
        return f"must be at most {longest} characters (got {len(name)})"
    if "\x00" in name:  # PostgreSQL text cannot hold it: refused here, naming the field
        return "must not contain a NUL character"
    return None


def too_long(value: str, longest: int) -> str | None:
    """The message for a string longer than ``longest`` characters, else None."""
    return f"must be at most {longest} characters (got {len(value)})" if len(value) > longest else None
