"""`Client` is `AsyncClient`, blocking: the same public methods with the same parameters. Before,
the sync client had drifted 13 methods behind; these tests fail as soon as one side gains, loses or
changes a method the other does not.

The documented differences (`jobqueue.client.sync_client`'s docstring) are the only ones allowed:
connection types, the kind of context manager, the client's own type, and constructor options
that only the async client can use.
"""

from __future__ import annotations

import inspect

import pytest

from jobqueue.client import AsyncClient, Client

#: How an annotation of AsyncClient reads on Client.
SYNC_SPELLING = {
    "psycopg.AsyncConnection": "psycopg.Connection",
    "AsyncContextManager": "ContextManager",
    "AsyncClient": "Client",
}
#: Constructor options of AsyncClient alone: group commit (`submit_lanes`, ``coalesce_*``) needs an
#: event loop; the sync pool takes no connect timeout; `Client.get` always decrypts what it can.
ASYNC_ONLY_OPTIONS = {
    "connect_timeout",
    "submit_lanes",
    "coalesce_max_jobs",
    "coalesce_stall_after",
    "coalesce_lock_wait",
    "decrypt_results",
}
#: Methods that return a context manager rather than a coroutine on AsyncClient.
NOT_COROUTINES = {"connection"}


def public_methods(cls: type) -> dict[str, object]:
    return {name: member for name, member in vars(cls).items() if callable(member) and not name.startswith("_")}


def as_sync(annotation: object) -> object:
    if not isinstance(annotation, str):
        return annotation
    for async_spelling, sync_spelling in SYNC_SPELLING.items():
        annotation = annotation.replace(async_spelling, sync_spelling)
    return annotation


def shape(parameter: inspect.Parameter, sync: bool) -> tuple:
    annotation = parameter.annotation if sync else as_sync(parameter.annotation)
    return parameter.name, parameter.kind, parameter.default, annotation


def test_both_clients_have_the_same_public_methods():
    async_only = public_methods(AsyncClient).keys() - public_methods(Client).keys()
    sync_only = public_methods(Client).keys() - public_methods(AsyncClient).keys()
    assert (sorted(async_only), sorted(sync_only)) == ([], [])


@pytest.mark.parametrize("name", sorted(public_methods(AsyncClient)))
def test_each_method_takes_the_same_parameters_and_returns_the_same_type(name):
    async_method, sync_method = getattr(AsyncClient, name), getattr(Client, name)
    ours, theirs = inspect.signature(async_method), inspect.signature(sync_method)
    assert [shape(p, sync=False) for p in ours.parameters.values()] == [
        shape(p, sync=True) for p in theirs.parameters.values()
    ]
    assert as_sync(ours.return_annotation) == theirs.return_annotation
    assert inspect.iscoroutinefunction(async_method) is (name not in NOT_COROUTINES)
    assert not inspect.iscoroutinefunction(sync_method)


def test_the_constructors_differ_only_by_the_async_options():
    ours = inspect.signature(AsyncClient.__init__).parameters
    theirs = inspect.signature(Client.__init__).parameters
    assert ours.keys() - theirs.keys() == ASYNC_ONLY_OPTIONS and theirs.keys() <= ours.keys()
    assert [shape(ours[name], sync=False) for name in theirs] == [shape(p, sync=True) for p in theirs.values()]


def test_both_are_context_managers_of_their_kind():
    assert {"__aenter__", "__aexit__"} <= vars(AsyncClient).keys()
    assert {"__enter__", "__exit__"} <= vars(Client).keys()
