"""Payload encryption without a database: the key ring's configuration, the envelope format,
sealing by path, opening, redaction and re-wrapping."""

from __future__ import annotations

import base64
import json

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.keywrap import aes_key_unwrap

from jobqueue.app import JobQueue
from jobqueue.config import Settings
from jobqueue.encryption import (MARKER, REDACTED, Sealer, holds_envelope, open_payload, redact, rewrap, seal_fields,
                                 seal_json)
from jobqueue.errors import EncryptionError, EncryptionKeyMissing, EncryptionUnavailable, ValidationError
from jobqueue.keyring import KeyRing, new_key_line


def ring(*ids: str) -> KeyRing:
    return KeyRing.parse(",".join(f"{kid}:{base64.b64encode(kid.encode().ljust(32, b'x')).decode()}" for kid in ids),
                         "test")


def test_a_ring_lists_keys_in_order_and_the_first_encrypts(tmp_path):
    keys = KeyRing.parse(new_key_line("new") + "\n# old one\n" + new_key_line("old"), "test")
    assert keys.ids == ("new", "old") and keys.current_id == "new" and len(keys.current_key) == 32
    path = tmp_path / "keys"
    path.write_text(new_key_line("a") + "," + new_key_line("b") + "\n")
    assert Settings.from_env({"JOBQUEUE_ENCRYPTION_KEYS_FILE": str(path)}).encryption_keys.ids == ("a", "b")
    assert Settings.from_env({}).encryption_keys is None
    assert "new" in repr(keys) and base64.b64encode(keys.current_key).decode() not in repr(keys)


@pytest.mark.parametrize("env, message", [
    ({"JOBQUEUE_ENCRYPTION_KEYS": "k1"}, "entry 'k1' must look like id:base64key"),
    ({"JOBQUEUE_ENCRYPTION_KEYS": "k1:not base64!"}, "key 'k1' is not valid base64"),
    ({"JOBQUEUE_ENCRYPTION_KEYS": "k1:" + base64.b64encode(b"short").decode()}, "key 'k1' is 5 bytes"),
    ({"JOBQUEUE_ENCRYPTION_KEYS": "bad id:" + base64.b64encode(bytes(32)).decode()}, "key id 'bad id'"),
    ({"JOBQUEUE_ENCRYPTION_KEYS": new_key_line("k1") + "," + new_key_line("k1")}, "'k1' is listed twice"),
    ({"JOBQUEUE_ENCRYPTION_KEYS": " # nothing"}, "lists no keys"),
    ({"JOBQUEUE_ENCRYPTION_KEYS": new_key_line("k1"), "JOBQUEUE_ENCRYPTION_KEYS_FILE": "/x"}, "not both"),
    ({"JOBQUEUE_ENCRYPTION_KEYS_FILE": "/nonexistent/keys"}, "cannot read '/nonexistent/keys'"),
])
def test_bad_key_configuration_is_a_clear_error_at_settings_time(env, message):
    with pytest.raises(ValueError) as caught:
        Settings.from_env(env)
    assert message in str(caught.value)


def test_a_field_is_sealed_in_the_documented_format_and_opens_to_its_value():
    keys = ring("k1")
    payload = {"card": {"number": "4111 1111 1111 1111", "exp": "12/30"}, "ssn": 123456789, "user": "ann"}
    sealed = seal_fields(payload, ["card.number", "ssn"], keys)
    assert payload["card"]["number"] == "4111 1111 1111 1111"  # the caller's payload is untouched
    assert sealed["user"] == "ann" and sealed["card"]["exp"] == "12/30"
    envelope = sealed["card"]["number"]
    assert set(envelope) == {MARKER, "kid", "dek", "nonce", "ct"} and envelope[MARKER] == 1 and envelope["kid"] == "k1"
    assert sealed["ssn"]["dek"] == envelope["dek"]  # one data key per job
    assert "4111" not in json.dumps(sealed) and "123456789" not in json.dumps(sealed)
    # Decrypt by the recipe in docs/security.md, with nothing of jobqueue's: unwrap, then AES-GCM.
    data_key = aes_key_unwrap(keys.get("k1"), base64.b64decode(envelope["dek"]))
    plain = AESGCM(data_key).decrypt(base64.b64decode(envelope["nonce"]), base64.b64decode(envelope["ct"]), None)
    assert json.loads(plain) == "4111 1111 1111 1111"
    assert open_payload(sealed, keys) == payload  # a number comes back a number (its JSON was encrypted)
    assert open_payload(payload, keys) is payload  # nothing sealed: the same object
    assert seal_fields(sealed, ["ssn"], keys)["ssn"] == sealed["ssn"]  # already encrypted: left as it is


def test_sealing_a_missing_field_names_it_and_bad_paths_are_refused():
    with pytest.raises(ValidationError) as caught:
        seal_fields({"card": {"exp": "12/30"}}, ["card.number"], ring("k1"), field_prefix="jobs[2].")
    assert caught.value.field == "jobs[2].payload.card.number" and "'card.number' is missing" in caught.value.message
    with pytest.raises(ValidationError) as caught:
        seal_fields({"card": "text"}, ["card.number"], ring("k1"))
    assert caught.value.field == "payload.card.number"
    with pytest.raises(ValidationError, match="encrypt"):
        Sealer(ring("k1")).seal("t", {"a": 1}, "a")  # one string, not a list
    with pytest.raises(ValidationError, match="'a..b' is not a dotted field name"):
        Sealer(ring("k1")).seal("t", {"a": 1}, ["a..b"])
    with pytest.raises(ValueError, match="not a dotted field name"):
        JobQueue().task("t", encrypted=[""])
    with pytest.raises(EncryptionUnavailable, match="JOBQUEUE_ENCRYPTION_KEYS"):
        seal_fields({"a": 1}, ["a"], None)


def test_opening_needs_the_key_and_an_intact_value():
    sealed = seal_fields({"ssn": "123"}, ["ssn"], ring("k1"))
    with pytest.raises(EncryptionKeyMissing) as caught:
        open_payload(sealed, ring("k2"))
    assert caught.value.key_id == "k1" and "'k1'" in str(caught.value) and "ssn" in str(caught.value)
    with pytest.raises(EncryptionKeyMissing):
        open_payload(sealed, None)
    altered = {"ssn": {**sealed["ssn"], "ct": base64.b64encode(b"x" * 20).decode()}}
    with pytest.raises(EncryptionError, match="fails authentication"):
        open_payload(altered, ring("k1"))
    with pytest.raises(EncryptionError, match="malformed"):
        open_payload({"ssn": {MARKER: 1, "kid": "k1"}}, ring("k1"))
    with pytest.raises(EncryptionError, match="does not unwrap"):
        open_payload(sealed, KeyRing.parse(new_key_line("k1"), "test"))  # another key under the same id


def test_redaction_and_rewrapping_leave_the_data_alone():
    keys = ring("k1")
    sealed = {"items": [seal_json('"secret"', keys), 1], "ssn": seal_json("42", keys)}
    assert redact(sealed) == {"items": [REDACTED, 1], "ssn": REDACTED}
    assert holds_envelope(sealed) and not holds_envelope(redact(sealed))
    rotated = ring("k2", "k1")
    new, changed = rewrap(sealed, rotated)
    assert changed and new["ssn"]["kid"] == "k2" and new["ssn"]["ct"] == sealed["ssn"]["ct"]
    assert new["ssn"]["nonce"] == sealed["ssn"]["nonce"] and new["ssn"]["dek"] != sealed["ssn"]["dek"]
    assert open_payload(new, ring("k2")) == {"items": ["secret", 1], "ssn": 42}
    assert rewrap(new, rotated) == (new, False)
    with pytest.raises(EncryptionKeyMissing):
        rewrap(sealed, ring("k3"))


def test_the_sealer_adds_the_fields_workers_published_for_the_job_type():
    now = [0.0]
    sealer = Sealer(ring("k1"), ttl=5.0, clock=lambda: now[0])
    assert sealer.stale()
    sealer.learn({"charge": ["ssn"]})
    assert not sealer.stale()
    sealed = sealer.seal("charge", {"ssn": "1", "card": {"number": "2"}}, ["card.number"])
    assert holds_envelope(sealed["ssn"]) and holds_envelope(sealed["card"]["number"])
    assert sealer.seal("other", {"ssn": "1"}) == {"ssn": "1"}
    specs = sealer.seal_specs([{"job_type": "charge", "payload": {"ssn": "1"}},
                               {"job_type": "echo", "payload": {"x": "2"}, "encrypt": ["x"]},
                               {"job_type": "echo", "payload": {"y": 3}}])
    assert holds_envelope(specs[0]["payload"]["ssn"]) and holds_envelope(specs[1]["payload"]["x"])
    assert "encrypt" not in specs[1] and specs[2] == {"job_type": "echo", "payload": {"y": 3}}
    with pytest.raises(ValidationError) as caught:
        sealer.seal_specs([{"job_type": "charge", "payload": {}}])
    assert caught.value.field == "jobs[0].payload.ssn"
    now[0] = 5.0
    assert sealer.stale()
    with pytest.raises(EncryptionUnavailable):
        Sealer(None).seal("charge", {"ssn": "1"}, ["ssn"])


def test_a_worker_app_that_encrypts_refuses_to_start_without_keys():
    app = JobQueue()
    app.task("plain")(lambda job: None)
    app.check_keys(None)
    app.task("secret", encrypt_result=True)(lambda job: None)
    with pytest.raises(ValueError, match="tasks secret use encryption"):
        app.check_keys(None)
    app.check_keys(ring("k1"))
    assert app.encrypted_fields_by_type() == {"plain": [], "secret": []}


def test_keys_are_random():
    assert new_key_line("a") != new_key_line("a")
    assert len(base64.b64decode(new_key_line("a").split(":")[1])) == 32
