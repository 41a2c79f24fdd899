"""``/circuits``: the circuit breakers workers declared — state, failures in the current window,
settings and job types; an operator may hold one open or close it. Admin keys only: a breaker is
the workers' state, over job types of any producer (a producer sees its effect in its own jobs,
which wait while their breaker is open). An unknown name is a 404: breakers come from the workers' code, not from the
API.
"""

from __future__ import annotations

import msgspec
from litestar import Controller, get, post
from litestar.params import FromPath

from jobqueue.api.auth import admin_only
from jobqueue.api.errors import error_responses
from jobqueue.api.services import ServicesDep
from jobqueue.model.circuits import Circuit


class CircuitList(msgspec.Struct):
    circuits: list[Circuit]


class CircuitsController(Controller):
    path = "/circuits"
    tags = ["circuits"]

    @get(
        "/",
        summary="Every circuit breaker: state (closed, open, half_open), failures, settings, job types (admin)",
        guards=[admin_only],
        responses=error_responses(403, 503),
    )
    async def list_circuits(self, services: ServicesDep) -> CircuitList:
        return CircuitList(await services.client.circuits())

    @post(
        "/{name:str}/open",
        summary="Hold the breaker open: no worker claims its job types, no probe runs, until it is closed (admin)",
        status_code=200,
        guards=[admin_only],
        responses=error_responses(403, 404, 503),
    )
    async def open(self, name: FromPath[str], services: ServicesDep) -> Circuit:
        return await services.client.open_circuit(name)

    @post(
        "/{name:str}/close",
        summary="Close the breaker now; its failure count starts afresh (admin)",
        status_code=200,
        guards=[admin_only],
        responses=error_responses(403, 404, 503),
    )
    async def close(self, name: FromPath[str], services: ServicesDep) -> Circuit:
        return await services.client.close_circuit(name)
