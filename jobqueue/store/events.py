"""Calls on jobqueue.event_listeners (sql/queries/events.sql)."""

from __future__ import annotations

from jobqueue.db import Call, no_result


def register_listener(listener_id: str, *, ttl: float) -> Call[None]:
    return Call("event_listener_register", {"listener_id": listener_id, "ttl": ttl}, no_result)


def unregister_listener(listener_id: str) -> Call[None]:
    return Call("event_listener_unregister", {"listener_id": listener_id}, no_result)
