-- Runtime queries on jobqueue.event_listeners: API processes streaming job events register while
-- they LISTEN, so the job-event triggers only build and send events while someone reads them.

-- name: event_listener_register
-- Register (or refresh) a listener for %(ttl)s seconds; rows that expired long ago are removed.
WITH expired AS (
    DELETE FROM jobqueue.event_listeners WHERE expires_at < now() - interval '1 hour'
)
INSERT INTO jobqueue.event_listeners (listener_id, expires_at)
VALUES (%(listener_id)s, now() + make_interval(secs => %(ttl)s))
ON CONFLICT (listener_id) DO UPDATE SET expires_at = excluded.expires_at;

-- name: event_listener_unregister
DELETE FROM jobqueue.event_listeners WHERE listener_id = %(listener_id)s;
