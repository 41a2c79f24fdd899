"""Fixtures for the REST API tests: the real app served by uvicorn on a free port (real HTTP, real
PostgreSQL), API keys for two producers and an admin, and httpx clients holding them."""

from __future__ import annotations

import threading
from typing import Callable, Iterator

import httpx
import pytest
import uvicorn

from jobqueue.api import create_app
from jobqueue.client import Client
from jobqueue.config import Settings
from tests.support.settings import settings_of
from tests.support.waiting import wait_until


def api_settings(dsn: str, **overrides) -> Settings:
    """Quick to fail and to notice: no key cache, 1 s pool wait, depths refreshed every 50 ms."""
    base = dict(
        dsn=dsn,
        api_key_cache_seconds=0.0,
        api_db_timeout=1.0,
        api_connect_timeout=2,
        api_depth_refresh=0.05,
        api_retry_after=2,
        api_pool_size=4,
        poll_interval=1.0,
    )
    base.update(overrides)
    return settings_of(**base)


class ApiServer:
    """`create_app(settings)` under uvicorn in a thread of this process."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.server = uvicorn.Server(
            uvicorn.Config(
                create_app(settings),
                host="127.0.0.1",
                port=0,
                log_level="warning",
                lifespan="on",
                timeout_graceful_shutdown=0.5,
            )
        )
        self._thread = threading.Thread(target=self.server.run, daemon=True, name="test-api")
        self.url = ""

    def start(self) -> "ApiServer":
        self._thread.start()
        wait_until(lambda: self.server.started or not self._thread.is_alive(), timeout=15, message="API start")
        assert self.server.started, "the API did not start"
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(15)
        assert not self._thread.is_alive(), "the API did not stop"


@pytest.fixture
def start_api(dsn) -> Iterator[Callable[..., ApiServer]]:
    servers: list[ApiServer] = []

    def start(**overrides) -> ApiServer:
        server = ApiServer(api_settings(overrides.pop("dsn", dsn), **overrides)).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def api(start_api) -> ApiServer:
    return start_api()


@pytest.fixture
def keys(dsn) -> dict[str, str]:
    with Client(dsn, pool_size=1) as client:
        return {
            "alice": client.create_api_key("alice")[0],
            "bob": client.create_api_key("bob")[0],
            "admin": client.create_api_key("ops", role="admin")[0],
        }


@pytest.fixture
def http(api, keys) -> Iterator[Callable[[str | None], httpx.Client]]:
    """``http("alice")``: a client sending alice's key; ``http(None)``: no key at all."""
    clients: list[httpx.Client] = []

    def client_for(who: str | None = "alice") -> httpx.Client:
        headers = {"Authorization": f"Bearer {keys[who]}"} if who else {}
        client = httpx.Client(base_url=api.url, headers=headers, timeout=10.0)
        clients.append(client)
        return client

    yield client_for
    for client in clients:
        client.close()
