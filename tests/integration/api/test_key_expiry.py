"""API keys with a name and an expiry: an expired key is a 401 that names its expiry, on the first
request after it, however long the key cache would have kept it."""

from __future__ import annotations

import math
import time
from datetime import datetime, timedelta, timezone

import httpx
import pytest

from jobqueue.client import Client
from jobqueue.model.errors import ValidationError


def bearer(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=10.0)


def test_a_key_that_expires_while_cached_is_refused_at_its_expiry(start_api, dsn):
    """The cache holds keys for 60 s here: before, a key expiring in that time kept working until
    the cache reloaded it."""
    api = start_api(api_key_cache_seconds=60.0)
    with Client(dsn, pool_size=1) as client:
        key, info = client.create_api_key("ci-bot", name="ci", expires_in=1.5)
    assert info.name == "ci" and info.expires_at is not None
    assert timedelta(seconds=1) < info.expires_at - info.created_at <= timedelta(seconds=1.5)
    with bearer(api.url, key) as http:
        assert http.get("/jobs").status_code == 200  # now cached
        time.sleep(max(0.0, (info.expires_at - datetime.now(timezone.utc)).total_seconds()) + 0.05)
        refused = http.get("/jobs")
        assert refused.status_code == 401, refused.text
        message = refused.json()["message"]
        assert "expired at" in message and info.expires_at.isoformat(timespec="seconds") in message
        assert "(ci)" in message and info.key_prefix in message
        assert http.post("/jobs", json={"job_type": "x"}).status_code == 401  # nothing written either


def test_a_key_without_expiry_never_expires_and_both_are_listed(dsn):
    with Client(dsn, pool_size=1) as client:
        _, forever = client.create_api_key("billing")
        _, monthly = client.create_api_key("billing", name="billing-prod", expires_in=timedelta(days=30))
        listed = {k.id: k for k in client.api_keys()}
    assert (listed[forever.id].name, listed[forever.id].expires_at) == (None, None)
    assert listed[monthly.id].name == "billing-prod"
    assert listed[monthly.id].expires_at - listed[monthly.id].created_at == timedelta(days=30)


@pytest.mark.parametrize(
    "options, field",
    [
        ({"expires_in": math.inf}, "expires_in"),
        ({"expires_in": -86400}, "expires_in"),
        ({"expires_in": 0}, "expires_in"),
        ({"expires_in": 99999999 * 86400}, "expires_in"),
        ({"expires_in": math.nan}, "expires_in"),
        ({"expires_in": "30d"}, "expires_in"),  # a number of seconds or a timedelta, in Python
        ({"name": ""}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"name": "ci\nadmin"}, "name"),
    ],
)
def test_bad_expiries_and_names_are_refused_and_nothing_is_created(dsn, conn, options, field):
    with Client(dsn, pool_size=1) as client, pytest.raises(ValidationError) as refused:
        client.create_api_key("ci-bot", **options)
    assert refused.value.field == field
    assert conn.execute("SELECT count(*) FROM jobqueue.api_keys").fetchone() == (0,)
