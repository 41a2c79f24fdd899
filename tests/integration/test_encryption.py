"""Payload field-level encryption end to end: what reaches the database (pg_dump of the jobqueue
schema's data), what the handler sees, rotation, a worker without the key, and what REST shows."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
import uuid

import httpx
import psycopg
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.keywrap import aes_key_wrap

from jobqueue import Client
from jobqueue.cli.keys import rotate
from jobqueue.crypto.keyring import KeyRing, new_key_line
from jobqueue.model.errors import ValidationError
from jobqueue.store import jobs as job_store
from tests.harness.devdb import pg_bindir
from tests.integration.api.conftest import start_api  # noqa: F401  (the fixture)
from tests.support import crypt_app
from tests.support.waiting import wait_until
from tests.support.workers import WorkerThread, spawn_worker, test_settings

CARD = "4111-1111-1111-1111"
SSN = "078-05-1120"
K1, K2 = new_key_line("k1"), new_key_line("k2")


@pytest.fixture(autouse=True)
def _clear_seen():
    crypt_app.seen.clear()
    yield
    crypt_app.seen.clear()


def keys(*lines: str) -> KeyRing:
    return KeyRing.parse(",".join(lines), "test")


def dump(dsn: str) -> str:
    """Every row of every jobqueue table, as pg_dump writes them."""
    return subprocess.run(
        [str(pg_bindir() / "pg_dump"), "--data-only", "--schema=jobqueue", dsn],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def state(conn, job_id) -> str:
    return conn.execute("SELECT state FROM jobqueue.jobs WHERE id = %s", (job_id,)).fetchone()[0]


def test_fields_a_task_declares_are_encrypted_by_a_producer_that_never_imported_it(dsn, conn):
    settings = test_settings(dsn, encryption_keys=keys(K1))
    with WorkerThread(crypt_app.queue, settings):  # started: it has published charge's encrypted fields
        with Client(dsn, settings=settings) as client:
            job_id = client.enqueue("charge", {"card": {"number": CARD, "exp": "12/30"}, "ssn": SSN, "n": 1})
            wait_until(lambda: state(conn, job_id) == "completed", timeout=10)
            # The handler saw the plaintext; its result was stored encrypted and get() decrypts it.
            assert crypt_app.seen == [("charge", {"card": {"number": CARD, "exp": "12/30"}, "ssn": SSN, "n": 1})]
            assert client.get(job_id).result == {"receipt": f"paid with {CARD}"}
            assert client.get(job_id).payload["card"]["exp"] == "12/30"
            assert client.get(job_id).payload["ssn"]["kid"] == "k1"
            keyless = Client(dsn, settings=test_settings(dsn))
            with keyless:
                assert keyless.get(job_id).result["kid"] == "k1"  # a status read without the key: as stored
    assert conn.execute("SELECT encrypted_fields FROM jobqueue.task_defaults WHERE job_type = 'charge'").fetchone()[
        0
    ] == ["card.number", "ssn"]
    report = rotate(conn, keys(K2, K1))  # the stored result is re-wrapped too: k1 is no longer needed
    assert (report.payloads, report.results) == (1, 1)
    with Client(dsn, settings=test_settings(dsn, encryption_keys=keys(K2))) as rotated:
        assert rotated.wait(job_id, timeout=5) == {"receipt": f"paid with {CARD}"}
    stored = dump(dsn)
    assert job_id.hex[:8] in stored.replace("-", "")  # the dump does hold the job...
    assert CARD not in stored and SSN not in stored and "12/30" in stored  # ...but not its secrets


def test_per_call_and_batch_fields_are_encrypted_and_a_missing_one_writes_nothing(dsn, conn):
    settings = test_settings(dsn, encryption_keys=keys(K1))
    with Client(dsn, settings=settings) as client:
        one = client.enqueue("echo", {"ssn": SSN, "tags": ["a", CARD]}, encrypt=["ssn", "tags"])
        many = client.enqueue_many(
            [
                {"job_type": "echo", "payload": {"card": {"number": CARD}}, "encrypt": ["card.number"]},
                {"job_type": "echo", "payload": {"plain": "visible"}},
            ]
        )
        with pytest.raises(Exception) as caught:
            client.enqueue_many(
                [
                    {"job_type": "echo", "payload": {"a": 1}},
                    {"job_type": "echo", "payload": {"card": {}}, "encrypt": ["card.number"]},
                ]
            )
        assert getattr(caught.value, "field", None) == "jobs[1].payload.card.number"
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs").fetchone()[0] == 3
    stored = dump(dsn)
    assert CARD not in stored and SSN not in stored and "visible" in stored
    with WorkerThread(crypt_app.queue, settings):
        wait_until(lambda: all(state(conn, j) == "completed" for j in [one, *many]), timeout=10)
    assert sorted(map(json.dumps, (p for _, p in crypt_app.seen))) == sorted(
        map(json.dumps, [{"ssn": SSN, "tags": ["a", CARD]}, {"card": {"number": CARD}}, {"plain": "visible"}])
    )


def producer_envelope(key_line: str, value, job_id: uuid.UUID, *path: str, producer: str = "") -> dict:
    """An encrypted field made by hand from the format in docs/security.md, without jobqueue's code:
    sealed for the job ``job_id`` of ``producer`` (none: empty), type echo, at ``path``."""
    kid, encoded = key_line.split(":")
    data_key, nonce = os.urandom(32), os.urandom(12)
    bound_to = "\0".join(["jobqueue/2", "payload", producer, "echo", str(job_id), *path]).encode()
    return {
        "$jobqueue_enc": 2,
        "kid": kid,
        "dek": base64.b64encode(aes_key_wrap(base64.b64decode(encoded), data_key)).decode(),
        "nonce": base64.b64encode(nonce).decode(),
        "ct": base64.b64encode(AESGCM(data_key).encrypt(nonce, json.dumps(value).encode(), bound_to)).decode(),
    }


def uuid7() -> uuid.UUID:
    """A version-7 UUID of now, written from RFC 9562 (what a SQL producer that seals makes)."""
    return uuid.UUID(
        int=(time.time_ns() // 1_000_000) << 80 | 0x7 << 76 | 0b10 << 62 | int.from_bytes(os.urandom(7), "big")
    )


def test_sql_producers_pass_values_they_encrypted_and_rotation_frees_the_old_key(dsn, conn):
    job_id = uuid7()
    payload = {
        "ssn": producer_envelope(K1, SSN, job_id, "ssn"),
        "card": {"number": producer_envelope(K1, {"n": CARD}, job_id, "card", "number")},
    }
    given = conn.execute(
        "SELECT id FROM jobqueue.enqueue_many(%s::jsonb)",
        (json.dumps([{"id": str(job_id), "job_type": "echo", "payload": payload}]),),
    ).fetchone()[0]
    assert given == job_id
    assert SSN not in dump(dsn) and CARD not in dump(dsn)
    # k2 now encrypts, k1 still decrypts: rotation re-wraps the stored data keys under k2 ...
    report = rotate(conn, keys(K2, K1), batch_size=1)
    assert (report.payloads, report.results, report.missing, report.bound) == (1, 0, {}, 0)
    rotated = conn.execute("SELECT payload FROM jobqueue.jobs WHERE id = %s", (job_id,)).fetchone()[0]
    assert rotated["ssn"]["kid"] == rotated["card"]["number"]["kid"] == "k2"
    assert rotated["ssn"]["ct"] == payload["ssn"]["ct"]  # the data itself was not touched
    assert rotate(conn, keys(K2, K1)).payloads == 0  # nothing left under k1
    # ... so a worker holding only k2 runs it.
    with WorkerThread(crypt_app.queue, test_settings(dsn, encryption_keys=keys(K2))):
        wait_until(lambda: state(conn, job_id) == "completed", timeout=10)
    assert crypt_app.seen == [("echo", {"ssn": SSN, "card": {"number": {"n": CARD}}})]


def test_a_job_id_given_at_enqueue_must_be_a_version_7_uuid_of_now(conn):
    def refused(job_id: str) -> str:
        with pytest.raises(ValidationError) as caught:
            with Client(conn.info.dsn, settings=test_settings(conn.info.dsn)) as client:
                client._run(
                    job_store.enqueue_many(json.dumps([{"job_type": "echo"}, {"job_type": "echo", "id": job_id}])), None
                )
        assert caught.value.field == "jobs[1].id"
        return caught.value.message

    assert "must be a version-7 UUID" in refused(str(uuid.uuid4()))
    assert "must be a version-7 UUID" in refused("not an id" * 1000)
    hour_ago = uuid.UUID(int=((time.time_ns() // 1_000_000 - 3_700_000) << 80) | uuid7().int & ((1 << 80) - 1))
    assert "within an hour of the database's clock" in refused(str(hour_ago))
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs").fetchone()[0] == 0
    taken = uuid7()
    conn.execute("SELECT jobqueue.enqueue_many(%s::jsonb)", (json.dumps([{"job_type": "echo", "id": str(taken)}]),))
    with pytest.raises(psycopg.errors.UniqueViolation):  # a live job's id is its own
        conn.execute("SELECT jobqueue.enqueue_many(%s::jsonb)", (json.dumps([{"job_type": "echo", "id": str(taken)}]),))


def test_old_jobs_still_run_after_a_new_key_is_listed_first(dsn, conn):
    with Client(dsn, settings=test_settings(dsn, encryption_keys=keys(K1))) as client:
        old = client.enqueue("echo", {"ssn": SSN}, encrypt=["ssn"])
    with Client(dsn, settings=test_settings(dsn, encryption_keys=keys(K2, K1))) as client:
        new = client.enqueue("echo", {"ssn": SSN}, encrypt=["ssn"])
        assert client.get(new).payload["ssn"]["kid"] == "k2"
    with WorkerThread(crypt_app.queue, test_settings(dsn, encryption_keys=keys(K2, K1))):
        wait_until(lambda: state(conn, old) == state(conn, new) == "completed", timeout=10)
    assert [p for _, p in crypt_app.seen] == [{"ssn": SSN}, {"ssn": SSN}]


def test_a_worker_without_the_key_dead_letters_the_job_at_once_naming_the_key(dsn, conn):
    with Client(dsn, settings=test_settings(dsn, encryption_keys=keys(K1))) as client:
        job_id = client.enqueue("echo", {"ssn": SSN}, encrypt=["ssn"], max_attempts=5)
    with WorkerThread(crypt_app.queue, test_settings(dsn, encryption_keys=keys(K2))):
        wait_until(lambda: state(conn, job_id) == "dead_letter", timeout=10)
    with Client(dsn, settings=test_settings(dsn)) as client:
        info = client.get(job_id)
    assert info.attempts == 1 and info.dead_reason == "permanent_error"
    assert info.last_error.error_type == "EncryptionKeyMissing" and "'k1'" in info.last_error.message
    assert crypt_app.seen == []


def test_rest_submissions_are_encrypted_and_reads_are_redacted(dsn, conn, start_api):
    settings = test_settings(dsn, encryption_keys=keys(K1))
    api = start_api(encryption_keys=keys(K1))
    with Client(dsn, settings=test_settings(dsn)) as admin:
        key, _ = admin.create_api_key("shop")
    with (
        WorkerThread(crypt_app.queue, settings),
        httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {key}"}) as http,
    ):
        single = http.post("/jobs", json={"job_type": "echo", "payload": {"ssn": SSN, "n": 1}, "encrypt": ["ssn"]})
        assert single.status_code == 201, single.text
        # charge's fields are encrypted because its task declares them (published by the worker).
        batch = http.post(
            "/jobs/batch", json={"jobs": [{"job_type": "charge", "payload": {"card": {"number": CARD}, "ssn": SSN}}]}
        )
        assert batch.status_code == 201, batch.text
        missing = http.post("/jobs", json={"job_type": "echo", "payload": {"n": 1}, "encrypt": ["ssn"]})
        assert missing.status_code == 422 and missing.json()["field"] == "payload.ssn"
        refused = http.post("/jobs/batch", json={"jobs": [{"job_type": "charge", "payload": {"ssn": SSN}}]})
        assert refused.status_code == 422 and refused.json()["field"] == "jobs[0].payload.card.number"
        ids = [single.json()["id"], batch.json()["jobs"][0]["id"]]
        wait_until(lambda: all(state(conn, j) == "completed" for j in ids), timeout=10)
        assert http.get(f"/jobs/{ids[0]}").json()["payload"] == {"ssn": "[encrypted]", "n": 1}
        charged = http.get(f"/jobs/{ids[1]}").json()
        assert charged["payload"] == {"card": {"number": "[encrypted]"}, "ssn": "[encrypted]"}
        assert charged["result"] == "[encrypted]"
        assert http.get(f"/jobs/{ids[1]}/result").json()["result"] == "[encrypted]"
    assert ("charge", {"card": {"number": CARD}, "ssn": SSN}) in crypt_app.seen
    stored = dump(dsn)
    assert CARD not in stored and SSN not in stored and "paid with" not in stored


def test_a_worker_with_bad_or_missing_keys_does_not_start(dsn):
    app = "tests.support.crypt_app:queue"
    for env, message in (
        ({"JOBQUEUE_ENCRYPTION_KEYS": "k1:c2hvcnQ="}, "key 'k1' is 5 bytes"),
        ({}, "tasks charge use encryption"),
    ):
        process = spawn_worker(dsn, app, env=env)
        output, _ = process.communicate(timeout=60)
        assert process.returncode == 2 and message in output, output


def test_rotation_leaves_values_it_cannot_rewrap_and_says_which_keys(dsn, conn, capsys, monkeypatch):
    """Exit 1 only for values under a key some rotation saw in its ring and this one lacks (dropped
    too early). Values under a key id no ring here ever held, or damaged ones, can be written by
    anyone who may enqueue: reported apart, and no reason to fail every run."""
    from jobqueue.cli import main

    with Client(dsn, settings=test_settings(dsn, encryption_keys=keys(K1))) as client:
        old = client.enqueue("echo", {"ssn": SSN}, encrypt=["ssn"])
    assert rotate(conn, keys(K1)).line().startswith("re-wrapped 0 payloads")  # records k1
    forged = {"x": {**producer_envelope(new_key_line("zz"), 1, uuid7(), "x")}}
    damaged = {"x": {"$jobqueue_enc": 2, "kid": "k1"}}
    for payload in (forged, damaged):
        conn.execute("SELECT jobqueue.enqueue('echo', %s::jsonb)", (json.dumps(payload),))
    monkeypatch.setenv("JOBQUEUE_ENCRYPTION_KEYS", K2)  # k1 already dropped: too early
    assert main(["keys", "rotate", "--dsn", dsn]) == 1
    out = capsys.readouterr().out
    assert "re-wrapped 0 payloads" in out and f"keys this ring lacks: 'k1' (1 values) (e.g. job {old})" in out
    assert "key ids no key ring here ever held: 'zz' (1 values)" in out
    monkeypatch.setenv("JOBQUEUE_ENCRYPTION_KEYS", f"{K2},{K1}")
    assert main(["keys", "rotate", "--dsn", dsn, "--batch-size", "1"]) == 0  # the forged and damaged ones stay
    out = capsys.readouterr().out
    assert "re-wrapped 1 payloads" in out and "'zz' (1 values)" in out and "1 values are damaged" in out
    assert conn.execute("SELECT payload->'ssn'->>'kid' FROM jobqueue.jobs WHERE id = %s", (old,)).fetchone()[0] == "k2"
    assert (
        conn.execute(
            "SELECT count(*) FROM jobqueue.jobs WHERE payload = ANY(%s::jsonb[])",
            ([json.dumps(forged), json.dumps(damaged)],),
        ).fetchone()[0]
        == 2
    )
    monkeypatch.setenv("JOBQUEUE_ENCRYPTION_KEYS", K2)  # k1 dropped once nothing needs it
    assert main(["keys", "rotate", "--dsn", dsn]) == 0
    monkeypatch.delenv("JOBQUEUE_ENCRYPTION_KEYS")
    assert main(["keys", "rotate", "--dsn", dsn]) == 2
    assert "needs the key ring" in capsys.readouterr().err
    assert main(["keys", "generate", "--id", "k3"]) == 0
    assert KeyRing.parse(capsys.readouterr().out, "output").ids == ("k3",)


def test_without_keys_a_producer_refuses_to_store_a_field_in_plaintext(dsn, conn, start_api):
    with pytest.raises(Exception, match="no encryption keys") as caught:
        with Client(dsn, settings=test_settings(dsn)) as client:
            client.enqueue("echo", {"ssn": SSN}, encrypt=["ssn"])
    assert type(caught.value).__name__ == "EncryptionUnavailable"
    api = start_api()
    with Client(dsn, settings=test_settings(dsn)) as admin:
        key, _ = admin.create_api_key("shop")
    answer = httpx.post(
        f"{api.url}/jobs",
        headers={"Authorization": f"Bearer {key}"},
        json={"job_type": "echo", "payload": {"ssn": SSN}, "encrypt": ["ssn"]},
    )
    assert answer.status_code == 422 and answer.json()["error"] == "encryption_unavailable"
    assert answer.json()["field"] == "encrypt"
    assert conn.execute("SELECT count(*) FROM jobqueue.jobs").fetchone()[0] == 0


def test_wait_without_the_results_key_names_it(dsn, conn):
    from jobqueue.model.errors import EncryptionKeyMissing

    settings = test_settings(dsn, encryption_keys=keys(K1))
    with WorkerThread(crypt_app.queue, settings), Client(dsn, settings=settings) as client:
        job_id = client.enqueue("charge", {"card": {"number": CARD}, "ssn": SSN})
        assert client.wait(job_id, timeout=10) == {"receipt": f"paid with {CARD}"}
    with Client(dsn, settings=test_settings(dsn, encryption_keys=keys(K2))) as other:
        with pytest.raises(EncryptionKeyMissing, match="'k1'"):
            other.wait(job_id, timeout=5)
