"""Every action, through every path it has — REST, the dashboard's buttons, the CLI, the Python
clients, SQL — leaves exactly one entry in the audit log, naming the right actor: the API key (its
producer, its id, the HTTP client's address) for the REST API, which runs as a least-privilege
``jobqueue_api`` login; the login role (and the producer it is held to) otherwise, the CLI and the
clients as a ``jobqueue_admin`` login.

One database and one API for the whole matrix; each case sets up what it needs (factories, which
record nothing, or earlier actions), then the entries after the log's head are the case's own.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from dataclasses import dataclass
from typing import Any, Callable

import httpx
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from jobqueue.api.dashboard import ROUTES
from jobqueue.cli import main as cli_main
from jobqueue.client import AsyncClient, Client
from jobqueue.crypto.keyring import new_key_line
from jobqueue.db import gateway as db
from jobqueue.model.audit import ACTIONS
from jobqueue.store import circuits as circuit_store
from tests.support import circuit_app
from tests.support.audit import entries_after, last_seq
from tests.support.factories import make_job
from tests.support.roles import login_as  # noqa: F401 (a fixture)

#: The dashboard's routes that only read; every other one is a button, and each must be a case below.
DASHBOARD_READS = {"overview", "running", "history", "jobs", "job", "dlq", "circuits", "schedules"}
SCHEDULE = {"cron": "0 3 * * *", "job_type": "report"}


@dataclass(frozen=True)
class Who:
    """What an entry must say about who acted."""

    actor: str
    db_role: str
    application_name: str
    api_key_id: uuid.UUID | None = None
    producer_id: str | None = None
    client_addr: str | None = "127.0.0.1"


@dataclass(frozen=True)
class Case:
    path: str
    action: str | tuple[str, ...]  # several: one entry of each (`jobqueue roles login`)
    who: Who
    act: Callable[[Any], Any]  # does it, given what setup made; returns the target the entry must name (None: any)
    setup: Callable[[], Any] = lambda: None  # what the action needs, before the log's head is read

    @property
    def actions(self) -> tuple[str, ...]:
        return (self.action,) if isinstance(self.action, str) else self.action


class World:
    """The database, the API as a jobqueue_api login, an admin login for the CLI and clients, keys."""

    def __init__(self, conn, dsn, login_as, start_api, monkeypatch) -> None:  # noqa: F811
        self.conn, self.dsn, self.monkeypatch = conn, dsn, monkeypatch
        self.admin_dsn = login_as("admin")
        api_dsn = login_as("api")
        self.sql_producer_dsn = login_as("producer", producer="alice")
        self.spare_login = conninfo_to_dict(login_as("readonly"))["user"]
        self.admin_login = conninfo_to_dict(self.admin_dsn)["user"]
        self.api_login = conninfo_to_dict(api_dsn)["user"]
        self.producer_login = conninfo_to_dict(self.sql_producer_dsn)["user"]
        self.superuser = conn.execute("SELECT current_user").fetchone()[0]
        self.address = conn.execute("SELECT host(inet_client_addr())").fetchone()[0]  # a login's, as the server sees it
        with Client(self.admin_dsn, pool_size=1) as client:
            admin_key, self.admin_key = client.create_api_key("ops", role="admin")
            alice_key, self.alice_key = client.create_api_key("alice")
        self.server = start_api(dsn=api_dsn)
        self.admin = httpx.Client(base_url=self.server.url, headers={"Authorization": f"Bearer {admin_key}"})
        self.alice = httpx.Client(base_url=self.server.url, headers={"Authorization": f"Bearer {alice_key}"})
        self.client = Client(self.admin_dsn, pool_size=1).open()
        app = circuit_app.queue
        db.run_sync(conn, circuit_store.sync(list(app.circuits.values()), app.circuit_by_type(), app=app.name))
        self.n = 0

    def close(self) -> None:
        self.admin.close()
        self.alice.close()
        self.client.close()

    def name(self, kind: str) -> str:
        self.n += 1
        return f"{kind}-{self.n}"

    # who acted, per path
    def rest(self, key: str = "admin") -> Who:
        info = self.admin_key if key == "admin" else self.alice_key
        return Who(info.producer_id, self.api_login, "jobqueue-api", info.id, None if key == "admin" else "alice")

    def login(self, role: str, application_name: str, producer: str | None = None) -> Who:
        return Who(role, role, application_name, None, producer, self.address)

    # what actions need (factories record nothing; the others are actions, made before the head is read)
    def job(self) -> str:
        return str(make_job(self.conn, producer_id="alice"))

    def dead(self) -> str:
        return str(make_job(self.conn, state="dead_letter", producer_id="alice"))

    def dead_queue(self) -> str:
        queue = self.name("dlq")
        for _ in range(3):
            make_job(self.conn, state="dead_letter", producer_id="alice", queue=queue)
        return queue

    def queue(self) -> str:
        """A queue with a job in it: a pause of a queue nothing knows is refused, and writes nothing."""
        name = self.name("q")
        make_job(self.conn, producer_id="alice", queue=name)
        return name

    def schedule(self) -> str:
        name = self.name("sched")
        self.client.schedules.add(name, **SCHEDULE)
        return name

    def limit(self) -> str:
        name = self.name("t")
        self.client.set_limit("job_type", name, concurrency=1)
        return name

    def key(self) -> str:
        return str(self.client.create_api_key("bob")[1].id)

    # the paths
    def http(self, method: str, path: str, who: str = "admin", **kwargs: Any) -> None:
        response = (self.admin if who == "admin" else self.alice).request(method, path, **kwargs)
        assert response.status_code < 300, (method, path, response.status_code, response.text)

    def cli(self, *args: str, dsn: str | None = None) -> None:
        assert cli_main([*args, "--dsn", dsn or self.admin_dsn]) == 0, args

    def sql(self, dsn: str, statement: str, *params: Any) -> None:
        with psycopg.connect(dsn, autocommit=True, application_name="psql") as connection:
            connection.execute(statement, params)

    def run_async(self, use: Callable[[AsyncClient], Any]) -> Any:
        async def run() -> Any:
            async with AsyncClient(self.admin_dsn, pool_size=1) as client:
                return await use(client)

        return asyncio.run(run())


def _on(use: Callable[[str], Any]) -> Callable[[str], str]:
    """An act on the target setup made, naming it."""

    def act(target: str) -> str:
        use(target)
        return target

    return act


def rest_cases(w: World) -> list[Case]:
    admin = w.rest()

    def rest(action: str, method: str, path: str, setup: Callable[[], str], body: Any = None) -> Case:
        return Case("rest", action, admin, _on(lambda t: w.http(method, path.format(t), json=body)), setup)

    def bulk(action: str, method: str, path: str) -> Case:
        return Case("rest", action, admin, lambda q: w.http(method, path, params={"queue": q}), w.dead_queue)

    def limit(action: str, method: str, body: Any, setup: Callable[[], str]) -> Case:
        act = lambda n: w.http(method, f"/limits/job_type/{n}", json=body) or f"job_type:{n}"  # noqa: E731
        return Case("rest", action, admin, act, setup)

    changed = {**SCHEDULE, "cron": "0 4 * * *"}
    return [
        Case(
            "rest, producer key",
            "job.cancel",
            w.rest("alice"),
            _on(lambda j: w.http("POST", f"/jobs/{j}/cancel", "alice")),
            w.job,
        ),
        rest("job.cancel", "POST", "/jobs/{}/cancel", w.job),
        rest("job.delete", "DELETE", "/admin/jobs/{}", w.job),
        rest("dlq.retry", "POST", "/admin/jobs/{}/retry", w.dead),
        bulk("dlq.retry_all", "POST", "/admin/dlq/retry-all"),
        Case(
            "rest",
            "job.cancel_all",
            admin,
            lambda q: w.http("POST", "/admin/jobs/cancel", params={"queue": q}),
            w.queue,
        ),
        bulk("dlq.purge", "DELETE", "/admin/dlq"),
        rest("queue.pause", "POST", "/queues/{}/pause", w.queue),
        rest("queue.resume", "POST", "/queues/{}/resume", w.queue),
        rest("queue.limits", "PUT", "/queues/{}/limits", w.queue, {"soft_limit": 5}),
        rest("queue.defaults", "PUT", "/queues/{}/defaults", w.queue, {"job_ttl_seconds": 60}),
        rest("queue.shedding", "PUT", "/queues/{}/shedding", w.queue, {"shed_low_retries": True}),
        rest("circuit.open", "POST", "/circuits/{}/open", lambda: "flaky-api"),
        rest("circuit.close", "POST", "/circuits/{}/close", lambda: "flaky-api"),
        limit("limit.set", "PUT", {"concurrency": 2}, lambda: w.name("t")),
        limit("limit.clear", "DELETE", None, w.limit),
        Case(
            "rest",
            "schedule.add",
            admin,
            _on(lambda n: w.http("POST", "/schedules", json={"name": n, **SCHEDULE})),
            lambda: w.name("sched"),
        ),
        rest("schedule.change", "PUT", "/schedules/{}", w.schedule, changed),
        rest("schedule.pause", "POST", "/schedules/{}/pause", w.schedule),
        rest("schedule.resume", "POST", "/schedules/{}/resume", w.schedule),
        rest("schedule.run", "POST", "/schedules/{}/run", w.schedule),
        rest("schedule.remove", "DELETE", "/schedules/{}", w.schedule),
    ]


#: Each dashboard button: its route's method, the action, and what fills its placeholder.
BUTTONS: dict[str, tuple[str, str, str]] = {
    "cancel": ("POST", "job.cancel", "job"),
    "delete": ("DELETE", "job.delete", "job"),
    "retry": ("POST", "dlq.retry", "dead"),
    "retryAll": ("POST", "dlq.retry_all", "dead_queue"),
    "purge": ("DELETE", "dlq.purge", "dead_queue"),
    "pause": ("POST", "queue.pause", "queue"),
    "resume": ("POST", "queue.resume", "queue"),
    "circuitOpen": ("POST", "circuit.open", "circuit"),
    "circuitClose": ("POST", "circuit.close", "circuit"),
    "schedulePause": ("POST", "schedule.pause", "schedule"),
    "scheduleResume": ("POST", "schedule.resume", "schedule"),
    "scheduleRun": ("POST", "schedule.run", "schedule"),
}


def dashboard_cases(w: World) -> list[Case]:
    """The buttons send the operator's key to the routes the page is given (`ROUTES`), as its
    script does; the bulk ones take the list's filters as their query."""

    def press(route: str, method: str, kind: str) -> Case:
        def act(target: str) -> str | None:
            if kind == "dead_queue":
                w.http(method, ROUTES[route], params={"queue": target})
                return None
            w.http(method, re.sub(r"\{\w+\}", target, ROUTES[route]))
            return target

        setup = (lambda: "flaky-api") if kind == "circuit" else getattr(w, kind)
        return Case("dashboard", BUTTONS[route][1], w.rest(), act, setup)

    return [press(route, method, kind) for route, (method, _, kind) in BUTTONS.items()]


def cli_cases(w: World) -> list[Case]:
    cli = w.login(w.admin_login, "jobqueue-cli")
    superuser = w.login(w.superuser, "jobqueue-cli")

    def run(action: str, setup: Callable[[], str], *args: str, path: str = "cli") -> Case:
        return Case(path, action, cli, _on(lambda t: w.cli(*[a.replace("{}", t) for a in args])), setup)

    def limit(action: str, setup: Callable[[], str], *extra: str) -> Case:
        verb = action.split(".")[1]
        act = lambda n: w.cli("limits", verb, "--job-type", n, *extra) or f"job_type:{n}"  # noqa: E731
        return Case("cli", action, cli, act, setup)

    def rotate(_: Any) -> str:
        w.monkeypatch.setenv("JOBQUEUE_ENCRYPTION_KEYS", new_key_line("k9"))
        try:
            w.cli("keys", "rotate")
        finally:
            w.monkeypatch.delenv("JOBQUEUE_ENCRYPTION_KEYS")
        return "k9"

    def new_login(login: str) -> str:
        w.cli("roles", "login", "--role", "worker", login, dsn=w.dsn)
        w.conn.execute(f'DROP OWNED BY "{login}"; DROP ROLE "{login}"')
        return login

    def roles(action: str, *args: str) -> Case:
        act = _on(lambda login: w.cli("roles", *args, login, dsn=w.dsn))  # CREATEROLE: the superuser
        return Case("cli", action, superuser, act, lambda: w.spare_login)

    fixed = lambda: "flaky-api"  # noqa: E731
    return [
        run("job.cancel", w.job, "cancel", "{}", path="cli: cancel"),
        run("job.cancel", w.job, "jobs", "cancel", "{}", path="cli: jobs cancel"),
        run("dlq.retry", w.dead, "jobs", "retry", "{}", path="cli: jobs retry"),
        run("dlq.retry", w.dead, "dlq", "retry", "{}", path="cli: dlq retry"),
        Case("cli", "dlq.retry_all", cli, lambda q: w.cli("dlq", "retry-all", "--queue", q), w.dead_queue),
        Case("cli", "job.cancel_all", cli, lambda q: w.cli("jobs", "cancel", "--queue", q), w.queue),
        Case("cli", "dlq.purge", cli, lambda q: w.cli("dlq", "purge", "--queue", q, "--yes"), w.dead_queue),
        run("queue.pause", w.queue, "queues", "pause", "{}"),
        run("queue.resume", w.queue, "queues", "resume", "{}"),
        run("queue.limits", w.queue, "queues", "limits", "{}", "--soft", "5", "--hard", "9"),
        run("queue.shedding", w.queue, "queues", "shedding", "{}", "on"),
        run("circuit.open", fixed, "circuits", "open", "{}"),
        run("circuit.close", fixed, "circuits", "close", "{}"),
        limit("limit.set", lambda: w.name("t"), "--concurrency", "3"),
        limit("limit.clear", w.limit),
        Case("cli", "apikey.create", cli, lambda _: w.cli("apikey", "create", "--producer", "carol")),
        run("apikey.revoke", w.key, "apikey", "revoke", "{}"),
        run("schedule.add", lambda: w.name("sched"), "schedule", "add", "{}", SCHEDULE["cron"], SCHEDULE["job_type"]),
        run("schedule.pause", w.schedule, "schedule", "pause", "{}"),
        run("schedule.resume", w.schedule, "schedule", "resume", "{}"),
        run("schedule.run", w.schedule, "schedule", "run-now", "{}"),
        run("schedule.remove", w.schedule, "schedule", "remove", "{}"),
        Case("cli", "keys.rotate", cli, rotate),
        roles("role.grant", "grant", "--role", "admin"),
        roles("role.revoke", "revoke", "--role", "admin"),
        Case(
            "cli: roles login",
            ("role.login", "role.grant", "role.timeouts"),
            superuser,
            new_login,
            lambda: f"jqtest_new_{uuid.uuid4().hex[:8]}",
        ),
    ]


def client_cases(w: World) -> list[Case]:
    c = w.client
    python = w.login(w.admin_login, "jobqueue-client")

    def call(action: str, setup: Callable[[], str], use: Callable[[str], Any], path: str = "client") -> Case:
        return Case(path, action, python, _on(use), setup)

    def in_async(use: Callable[[AsyncClient, str], Any]) -> Callable[[str], Any]:
        return lambda target: w.run_async(lambda a: use(a, target))

    limit = lambda n: c.set_limit("job_type", n, concurrency=1) and None  # noqa: E731
    return [
        call("job.cancel", w.job, c.cancel),
        call("job.delete", w.job, c.delete_waiting),
        call("dlq.retry", w.dead, c.retry_dead),
        Case(
            "client",
            "dlq.retry_all",
            python,
            lambda q: c.retry_dead_letters(queue=q, batch_size=2) and None,
            w.dead_queue,
        ),
        Case(
            "client", "dlq.purge", python, lambda q: c.purge_dead_letters(queue=q, batch_size=2) and None, w.dead_queue
        ),
        Case("client", "job.cancel_all", python, lambda q: c.cancel_jobs(queue=q, batch_size=2) and None, w.queue),
        call("queue.pause", w.queue, c.pause_queue),
        call("queue.resume", w.queue, c.resume_queue),
        call("queue.limits", w.queue, lambda q: c.set_queue_limits(q, soft_limit=1, hard_limit=2)),
        call("queue.defaults", w.queue, lambda q: c.set_queue_defaults(q, job_ttl=30, idempotency_window=None)),
        call("queue.shedding", w.queue, lambda q: c.set_queue_shedding(q, True)),
        call("circuit.open", lambda: "flaky-api", c.open_circuit),
        call("circuit.close", lambda: "flaky-api", c.close_circuit),
        Case("client", "limit.set", python, lambda n: limit(n) or f"job_type:{n}", lambda: w.name("t")),
        Case("client", "limit.clear", python, lambda n: c.clear_limit("job_type", n) or f"job_type:{n}", w.limit),
        Case("client", "apikey.create", python, lambda _: str(c.create_api_key("erin")[1].id)),
        call("apikey.revoke", w.key, c.revoke_api_key),
        call("schedule.add", lambda: w.name("sched"), lambda n: c.schedules.add(n, **SCHEDULE)),
        call("schedule.change", w.schedule, lambda n: c.schedules.put(n, "0 5 * * *", SCHEDULE["job_type"])),
        call("schedule.pause", w.schedule, c.schedules.pause),
        call("schedule.resume", w.schedule, c.schedules.resume),
        call("schedule.run", w.schedule, c.schedules.run_now),
        call("schedule.remove", w.schedule, c.schedules.remove),
        call("job.cancel", w.job, in_async(lambda a, j: a.cancel(j)), "async client"),
        call("queue.pause", w.queue, in_async(lambda a, q: a.pause_queue(q)), "async client"),
        Case(
            "async client",
            "dlq.retry_all",
            python,
            lambda q: w.run_async(lambda a: a.retry_dead_letters(queue=q, batch_size=2)) and None,
            w.dead_queue,
        ),
        call(
            "schedule.add",
            lambda: w.name("sched"),
            in_async(lambda a, n: a.schedules.add(n, **SCHEDULE)),
            "async client",
        ),
    ]


def sql_cases(w: World) -> list[Case]:
    superuser = w.login(w.superuser, "psql")

    def call(action: str, statement: str, *params: Any) -> Case:
        return Case(
            "sql", action, superuser, _on(lambda login: w.sql(w.dsn, statement, *params, login)), lambda: w.spare_login
        )

    return [
        Case(
            "sql, producer login",
            "job.cancel",
            w.login(w.producer_login, "psql", producer="alice"),
            _on(lambda j: w.sql(w.sql_producer_dsn, "SELECT jobqueue.cancel(%s)", j)),
            w.job,
        ),
        call("role.grant", "SELECT jobqueue.grant_role(%s, %s)", "admin"),
        call("role.revoke", "SELECT jobqueue.revoke_role(%s, %s)", "admin"),
        call("role.login", "SELECT jobqueue.create_login(password => %s, login => %s)", "s3cret"),
        call("role.timeouts", "SELECT jobqueue.set_login_timeouts(%s, interval '30s', interval '30s')"),
    ]


def check(w: World, case: Case) -> str | None:
    """None when the case left exactly its entries, as it should; else what is wrong."""
    made = case.setup()
    before = last_seq(w.conn)
    target = case.act(made)
    found = entries_after(w.conn, before)
    label = f"{case.path} {'+'.join(case.actions)}"
    if sorted(e["action"] for e in found) != sorted(case.actions):
        return f"{label}: recorded {[e['action'] for e in found]}"
    for entry in found:
        if target is not None and entry["action"] == case.actions[0] and entry["target"] != str(target):
            return f"{label}: target {entry['target']!r}, not {target!r}"
        fields = ("actor", "db_role", "application_name", "api_key_id", "producer_id", "client_addr")
        said = Who(*(entry[f] for f in fields))
        if said != case.who:
            return f"{label}: {said} instead of {case.who}"
    return None


def test_every_action_through_every_path_is_recorded_once_naming_its_actor(
    login_as,  # noqa: F811
    start_api,
    dsn,
    conn,
    monkeypatch,
):
    world = World(conn, dsn, login_as, start_api, monkeypatch)
    try:
        cases = rest_cases(world) + dashboard_cases(world) + cli_cases(world) + client_cases(world) + sql_cases(world)
        failures = [problem for case in cases if (problem := check(world, case)) is not None]
    finally:
        world.close()
    assert not failures, "\n".join(failures)
    performed = {action for case in cases for action in case.actions}
    assert performed == set(ACTIONS) - {"audit.prune"}, "an action no case performs"  # retention: test_audit_log
    buttons = set(ROUTES) - DASHBOARD_READS
    assert buttons == set(BUTTONS), f"dashboard buttons without a case: {buttons - set(BUTTONS)}"


@pytest.mark.parametrize("bulk", ["retry", "purge"])
def test_a_bulk_action_in_many_batches_is_one_entry_counting_what_matched(bulk, dsn, conn):
    for _ in range(5):
        make_job(conn, state="dead_letter", queue="bulk")
    make_job(conn, state="dead_letter", queue="other")
    before = last_seq(conn)
    with Client(dsn, pool_size=1) as client:
        if bulk == "retry":
            assert client.retry_dead_letters(queue="bulk", batch_size=2) == 5
        else:
            assert client.purge_dead_letters(queue="bulk", batch_size=2) == 5
    [entry] = entries_after(conn, before)
    assert entry["action"] == f"dlq.{bulk}" + ("_all" if bulk == "retry" else "")
    assert entry["details"]["matching"] == 5 and entry["details"]["queue"] == "bulk"
