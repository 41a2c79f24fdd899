"""The audit log itself (migration 0032): append-only for every role, the owner's and the superuser's
ordinary writes too; tamper-evident — `jobqueue audit verify` names the first entry a superuser
edited, removed, rewrote or forged; the chain stays one line while admins act at once, and a long
transaction that acted holds nobody back; actions that roll back leave nothing; what a session
claims to be is believed from the API's login only; retention removes a prefix, as the owner, and
leaves a chain that still verifies."""

from __future__ import annotations

import asyncio
import threading
import uuid

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from jobqueue.cli import main as cli_main
from jobqueue.client import Client
from jobqueue.maintenance.pruner import DAY, Pruner, PrunerOptions
from jobqueue.model.audit import Actor
from tests.support.audit import entries_after, last_seq
from tests.support.factories import make_job
from tests.support.maintenance import pools
from tests.support.roles import login_as  # noqa: F401 (a fixture)


def act(dsn: str, queue: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("SELECT jobqueue.audit('queue.pause', %s)", (queue,))


def as_superuser_without_triggers(conn, statement: str, *params) -> None:
    """What only a superuser (or the owner, disabling the table's triggers) can do to the log."""
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(statement, params or None)


def verify(dsn: str, capsys) -> tuple[int, str]:
    status = cli_main(["audit", "verify", "--dsn", dsn])
    return status, capsys.readouterr().out.strip()


def test_verify_names_the_entry_a_superuser_edited(dsn, conn, capsys):
    for n in range(5):
        act(dsn, f"q{n}")
    assert verify(dsn, capsys)[0] == 0
    as_superuser_without_triggers(conn, "UPDATE jobqueue.audit_log SET actor = 'someone else' WHERE seq = 3")
    status, out = verify(dsn, capsys)
    assert status == 1 and out == "audit log broken: entry 3 was edited: its hash is not that of its fields", out
    with Client(dsn, pool_size=1) as client:
        verdict = client.verify_audit_log()
    assert (verdict.intact, verdict.broken_at, verdict.checked) == (False, 3, 5)  # the stretch it recomputed


@pytest.mark.parametrize(
    "tampering, broken_at, says",
    [
        ("DELETE FROM jobqueue.audit_log WHERE seq = 2", 2, "entry 2 is missing"),
        ("DELETE FROM jobqueue.audit_log WHERE seq >= 4", 4, "entries 4 to 5 are missing"),
        ("DELETE FROM jobqueue.audit_log WHERE seq = 1", 1, "entry 1 is missing"),
        # the entry and its hash rewritten together: the next entry chained to the old hash
        (
            "UPDATE jobqueue.audit_log SET target = 'elsewhere' WHERE seq = 2; "
            "UPDATE jobqueue.audit_log a SET hash = jobqueue.audit_hash(a) WHERE seq = 2",
            2,
            "entry 2 was rewritten",
        ),
        # the newest one rewritten likewise: the head recorded its old hash
        (
            "UPDATE jobqueue.audit_log SET target = 'elsewhere' WHERE seq = 5; "
            "UPDATE jobqueue.audit_log a SET hash = jobqueue.audit_hash(a) WHERE seq = 5",
            5,
            "entry 5 was rewritten",
        ),
        (
            "INSERT INTO jobqueue.audit_log (at, actor, action, details, db_role, application_name) "
            "VALUES (now(), 'ghost', 'queue.resume', '{}', 'ghost', 'psql')",
            6,
            "1 entries are outside the chain",
        ),
        ("UPDATE jobqueue.audit_log SET seq = 7 WHERE seq = 5", 5, "entries 5 to 5 are missing"),
    ],
)
def test_verify_finds_the_first_break_however_the_chain_was_tampered_with(
    tampering, broken_at, says, dsn, conn, capsys
):
    for n in range(5):
        act(dsn, f"q{n}")
    as_superuser_without_triggers(conn, tampering)
    with Client(dsn, pool_size=1) as client:
        verdict = client.verify_audit_log()
    assert (verdict.intact, verdict.broken_at) == (False, broken_at), verdict
    assert verdict.problem.startswith(says), verdict.problem
    assert verify(dsn, capsys)[0] == 1


def test_verify_walks_a_long_chain_a_stretch_at_a_time(dsn, conn):
    conn.execute("SELECT jobqueue.audit('queue.pause', 'q' || n) FROM generate_series(1, 2500) AS n")
    from jobqueue.db import gateway as db
    from jobqueue.db.transactions import run_steps_sync
    from jobqueue.store import audit as audit_store

    with psycopg.connect(dsn, autocommit=True) as connection:
        verdict = run_steps_sync(connection, audit_store.verification(stretch=1000))
        assert (verdict.intact, verdict.checked, verdict.last_seq) == (True, 2500, 2500)
        as_superuser_without_triggers(conn, "UPDATE jobqueue.audit_log SET details = '{\"x\": 1}' WHERE seq = 2222")
        verdict = run_steps_sync(connection, audit_store.verification(stretch=1000))
        assert (verdict.broken_at, verdict.checked) == (2222, 2500)
        assert db.run_sync(connection, audit_store.list_entries(limit=1, scan=10)).entries[0].seq == 2500


@pytest.mark.parametrize("kind", ["admin", "api", "worker", "readonly", "producer"])
def test_no_role_may_write_the_log_but_through_an_action(kind, login_as, conn):  # noqa: F811
    role_dsn = login_as(kind)  # (its making is recorded)
    before = last_seq(conn)
    act(conn.info.dsn, "q")
    with psycopg.connect(role_dsn, autocommit=True) as role:
        for statement in (
            "UPDATE jobqueue.audit_log SET actor = 'x'",
            "DELETE FROM jobqueue.audit_log",
            "TRUNCATE jobqueue.audit_log",
            "INSERT INTO jobqueue.audit_log (at, actor, action, details, db_role, application_name) "
            "VALUES (now(), 'x', 'queue.pause', '{}', 'x', 'x')",
            "UPDATE jobqueue.audit_chain SET last_seq = 0",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                role.execute(statement)
        if kind in ("worker", "admin"):  # may prune, but never what is less than a day old
            with pytest.raises(psycopg.errors.InvalidParameterValue, match="at least 1 day"):
                role.execute("SELECT jobqueue.prune_audit_log(interval '23 hours', 10)")
            assert role.execute("SELECT jobqueue.prune_audit_log(interval '1 day', 10)").fetchone()[0] == 0
        else:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                role.execute("SELECT jobqueue.prune_audit_log(interval '1 day', 10)")
        if kind in ("readonly", "producer", "worker"):  # only the roles whose statements act may record
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                role.execute("SELECT jobqueue.audit('queue.pause', 'forged')")
    assert [e["target"] for e in entries_after(conn, before)] == ["q"]


def test_even_the_owner_cannot_update_or_delete_an_entry_with_the_triggers_on(dsn, conn):
    act(dsn, "q")
    for statement in (
        "UPDATE jobqueue.audit_log SET actor = 'x'",
        "UPDATE jobqueue.audit_log SET seq = NULL",
        "DELETE FROM jobqueue.audit_log",
        "TRUNCATE jobqueue.audit_log",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
            conn.execute(statement)
    # a forged entry with a chain position of its own is refused at its chaining
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
        conn.execute(
            "INSERT INTO jobqueue.audit_log (seq, at, actor, action, details, db_role, application_name) "
            "VALUES (99, now(), 'x', 'queue.pause', '{}', 'x', 'x')"
        )
    assert len(entries_after(conn, 0)) == 1


def test_two_admins_acting_at_once_both_commit_and_the_chain_is_one_line_in_commit_order(dsn, conn):
    first, second = psycopg.connect(dsn), psycopg.connect(dsn)
    try:
        first.execute("SELECT jobqueue.audit('queue.pause', 'first')")
        second.execute("SELECT jobqueue.audit('queue.pause', 'second')")
        second.commit()  # neither waited for the other to act; the later committer is chained later
        first.commit()
    finally:
        first.close()
        second.close()
    assert [(e["seq"], e["target"]) for e in entries_after(conn, 0)] == [(1, "second"), (2, "first")]
    with Client(dsn, pool_size=1) as client:
        assert client.verify_audit_log().intact


def test_many_actions_at_once_all_commit_each_with_its_own_place(dsn, conn):
    errors: list[BaseException] = []

    def admin(n: int) -> None:
        try:
            with Client(dsn, pool_size=1) as client:
                for k in range(10):
                    client.pause_queue(f"q{n}-{k}", force=True)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=admin, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    assert [e["seq"] for e in entries_after(conn, 0)] == list(range(1, 81))
    with Client(dsn, pool_size=1) as client:
        assert client.verify_audit_log().intact


def test_a_long_transaction_that_acted_holds_no_other_action_back(dsn, conn, login_as):  # noqa: F811
    """The chain's head is taken at COMMIT only: a producer that cancelled a job and keeps its
    transaction open does not stop an operator from acting meanwhile."""
    job = make_job(conn, producer_id="billing")
    producer = psycopg.connect(login_as("producer", producer="billing"))
    try:
        assert producer.execute("SELECT jobqueue.cancel(%s)", (job,)).fetchone()[0] == "cancelled"
        with psycopg.connect(dsn, autocommit=True, options="-c lock_timeout=500") as operator:
            operator.execute("SELECT jobqueue.audit('queue.pause', 'meanwhile')")
        producer.commit()
    finally:
        producer.close()
    assert [e["target"] for e in entries_after(conn, 0)][-2:] == ["meanwhile", str(job)]


def test_an_action_rolled_back_leaves_no_entry_and_no_gap(dsn, conn):
    with Client(dsn, pool_size=2) as client, client.connection() as connection:
        with pytest.raises(psycopg.errors.DivisionByZero):
            with connection.transaction():
                connection.execute("SELECT jobqueue.audit('queue.pause', 'undone')")
                connection.execute("SELECT 1/0")
        client.pause_queue("kept", force=True)
        assert [(e["seq"], e["target"]) for e in entries_after(conn, 0)] == [(1, "kept")]
        assert client.verify_audit_log().intact


@pytest.mark.parametrize(
    "action, target, details, field",
    [
        ("pause", "q", "{}", "action"),
        ("queue.Pause", "q", "{}", "action"),
        ("queue.pause; drop", "q", "{}", "action"),
        ("queue.pause", "x" * 1001, "{}", "target"),
        ("queue.pause", "q", "[]", "details"),
        ("queue.pause", "q", '{"x": "' + "y" * 20000 + '"}', "details"),
    ],
)
def test_a_bad_entry_is_refused_naming_the_field_and_nothing_is_written(action, target, details, field, conn):
    with pytest.raises(psycopg.errors.InvalidParameterValue) as refused:
        conn.execute("SELECT jobqueue.audit(%s, %s, %s::jsonb)", (action, target, details))
    assert refused.value.diag.column_name == field
    assert entries_after(conn, 0) == [] and last_seq(conn) == 0


def test_a_session_claiming_to_be_an_api_key_is_recorded_as_itself(login_as, conn):  # noqa: F811
    """jobqueue.actor is any session's to set: it is believed from the API's login (and the owner) only."""
    # what the API sends (Actor.claim()), here from sessions that are not the API
    forged = Actor(uuid.UUID(int=1), "ops", None, "10.0.0.1").claim()
    for kind in ("admin", "producer"):
        dsn = login_as(kind, producer="mallory" if kind == "producer" else None)
        login = conninfo_to_dict(dsn)["user"]
        job = make_job(conn, producer_id="mallory")
        with psycopg.connect(dsn) as session:
            session.execute("SELECT set_config('jobqueue.actor', %s, true)", (forged,))
            session.execute("SELECT jobqueue.cancel(%s)", (job,))
        [entry] = [e for e in entries_after(conn, 0) if e["target"] == str(job)]
        assert (entry["actor"], entry["api_key_id"], entry["db_role"]) == (login, None, login)
        assert entry["producer_id"] == ("mallory" if kind == "producer" else None)
    api = login_as("api")
    job = make_job(conn)
    with psycopg.connect(api) as session:  # the API's login is believed
        session.execute("SELECT set_config('jobqueue.actor', %s, true)", (forged,))
        session.execute("SELECT jobqueue.cancel(%s)", (job,))
    [entry] = [e for e in entries_after(conn, 0) if e["target"] == str(job)]
    assert (entry["actor"], str(entry["api_key_id"]), entry["client_addr"]) == (
        "ops",
        "00000000-0000-0000-0000-000000000001",
        "10.0.0.1",
    )
    with psycopg.connect(api) as session:  # a malformed claim is refused, the action with it
        session.execute("SELECT set_config('jobqueue.actor', %s, true)", ('{"actor": ""}',))
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            session.execute("SELECT jobqueue.cancel(%s)", (make_job(conn),))


def test_a_producer_login_reads_its_own_entries_only(login_as, conn):  # noqa: F811
    mine = make_job(conn, producer_id="billing")
    theirs = make_job(conn, producer_id="shop")
    billing, shop = login_as("producer", producer="billing"), login_as("producer", producer="shop")
    for dsn, job in ((billing, mine), (shop, theirs)):
        with psycopg.connect(dsn, autocommit=True) as session:
            session.execute("SELECT jobqueue.cancel(%s)", (job,))
    act(conn.info.dsn, "an operator's")
    with psycopg.connect(billing) as session:
        seen = session.execute("SELECT target, producer_id FROM jobqueue.audit_trail").fetchall()
    assert seen == [(str(mine), "billing")]
    with psycopg.connect(login_as("readonly")) as session:
        seen = session.execute("SELECT target FROM jobqueue.audit_trail WHERE action NOT LIKE 'role.%'").fetchall()
    assert sorted(target for (target,) in seen) == sorted([str(mine), str(theirs), "an operator's"])


def prune(dsn: str, **options) -> int:
    async def main() -> int:
        async with pools(dsn) as (pool,):
            return (await Pruner(pool, PrunerOptions(**options)).run_once()).audit

    return asyncio.run(main())


def written_ago(conn, days: float, target: str) -> None:
    """An entry written ``days`` ago, as its owner could insert one (the chain takes it at commit)."""
    conn.execute(
        "INSERT INTO jobqueue.audit_log (at, actor, action, target, details, db_role, application_name) "
        "VALUES (now() - make_interval(days => %s), 'ops', 'queue.pause', %s, '{}', 'ops', 'psql')",
        (days, target),
    )


def test_retention_removes_the_oldest_entries_as_a_prefix_and_the_rest_still_verifies(dsn, conn, login_as):  # noqa: F811
    for n in range(3):
        written_ago(conn, 400, f"old{n}")
    # past its retention, but committed after a newer entry: kept, since only a prefix may go
    late = psycopg.connect(dsn)
    try:
        late.execute(
            "INSERT INTO jobqueue.audit_log (at, actor, action, target, details, db_role, application_name) "
            "VALUES (now() - interval '400 days', 'ops', 'queue.pause', 'late', '{}', 'ops', 'psql')"
        )
        written_ago(conn, 10, "recent")
        late.commit()
    finally:
        late.close()
    worker = login_as("worker")  # the leader's pruner runs as the worker role (its making: 2 entries)
    assert prune(worker, batch_size=2) == 3  # two batches, the default retention: a year
    kept = [e for e in entries_after(conn, 0) if not e["action"].startswith("role.")]
    assert [e["target"] for e in kept] == ["recent", "late", None, None]
    pruned = [e for e in kept if e["action"] == "audit.prune"]  # each batch that removed some says so
    assert [(e["action"], e["details"]["through_seq"], e["details"]["removed"]) for e in pruned] == [
        ("audit.prune", 2, 2),
        ("audit.prune", 3, 1),
    ]
    assert {e["actor"] for e in pruned} == {conninfo_to_dict(worker)["user"]}
    assert conn.execute("SELECT pruned_seq FROM jobqueue.audit_chain").fetchone()[0] == 3
    with Client(dsn, pool_size=1) as client:
        verdict = client.verify_audit_log()
        assert (verdict.intact, verdict.first_seq, verdict.checked) == (True, 4, 6)
        assert prune(worker, audit_log=30 * DAY) == 0  # "recent" is 10 days old: the prefix stops there
        assert prune(worker, audit_log=5 * DAY) == 2  # "recent" and the late one
        client.pause_queue("after", force=True)  # the chain goes on from the anchor
        verdict = client.verify_audit_log()
        assert (verdict.intact, verdict.first_seq) == (True, 6)


@pytest.mark.parametrize("days", ["-1", "0", "0.5", "nan", "inf", "1e9", "ten"])
def test_the_audit_retention_setting_refuses_nonsense(days):
    from jobqueue.config import Settings

    with pytest.raises(ValueError, match="JOBQUEUE_RETENTION_AUDIT_DAYS"):
        Settings.from_env({"JOBQUEUE_RETENTION_AUDIT_DAYS": days})
    assert Settings.from_env({}).maintenance.retention_audit_days == 365


def test_an_action_that_changes_nothing_records_nothing(dsn, conn):
    done = make_job(conn, state="completed")
    cancelled = make_job(conn, state="cancelled")
    pending = make_job(conn)
    with Client(dsn, pool_size=1) as client:
        client.schedules.add("nightly", "0 3 * * *", "report")
        before = last_seq(conn)
        client.cancel(done)
        client.cancel(cancelled)
        client.cancel(uuid.uuid4())
        client.retry_dead(pending)  # not dead
        client.delete_waiting(done)  # has run
        client.schedules.put("nightly", "0 3 * * *", "report")  # redefined as it already is
        client.revoke_api_key(uuid.uuid4())
    assert entries_after(conn, before) == []


def test_under_repeatable_read_an_action_committed_meanwhile_is_a_serialization_failure(dsn, conn):
    """What docs/operations.md warns of: the head row changed after this transaction's snapshot."""
    with psycopg.connect(dsn) as mine:
        mine.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        mine.execute("SELECT jobqueue.audit('queue.pause', 'mine')")
        act(dsn, "theirs")
        with pytest.raises(psycopg.errors.SerializationFailure):
            mine.commit()
    assert [e["target"] for e in entries_after(conn, 0)] == ["theirs"]


def test_a_client_acts_for_a_key_only_inside_acting_and_only_in_its_own_thread(dsn, conn):
    """How the REST API attributes an action (`jobqueue.client.acting`), with the sync client: a
    web app of one's own running as the API's role could do the same."""
    from jobqueue.client.acting import acting

    with Client(dsn, pool_size=2) as client:
        key = client.create_api_key("ops", role="admin")[1]
        before = last_seq(conn)
        seen_elsewhere: list[int] = []
        with acting(key, "192.0.2.7"):
            client.pause_queue("for-the-key", force=True)
            other = threading.Thread(
                target=lambda: seen_elsewhere.append(client.pause_queue("elsewhere", force=True) and 1)
            )
            other.start()
            other.join()
            client.queue_stats()  # not an action: no transaction of its own, nothing recorded
        client.pause_queue("after", force=True)
    entries = {e["target"]: e for e in entries_after(conn, before)}
    assert set(entries) == {"for-the-key", "elsewhere", "after"}
    assert (entries["for-the-key"]["api_key_id"], entries["for-the-key"]["client_addr"]) == (key.id, "192.0.2.7")
    assert entries["for-the-key"]["actor"] == "ops" and entries["for-the-key"]["producer_id"] is None
    assert entries["elsewhere"]["api_key_id"] is None and entries["after"]["api_key_id"] is None
