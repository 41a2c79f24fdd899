-- Runtime queries on jobqueue.event_listeners: API processes and waiting clients streaming job
-- events register while they LISTEN, so the job-event triggers only build and send events while
-- someone reads them. Through functions (migration 0019): producer roles may register without
-- any right on the table.

-- name: event_listener_register
-- Register (or refresh) a listener for %(ttl)s seconds; rows that expired long ago are removed.
SELECT jobqueue.register_event_listener(%(listener_id)s, %(ttl)s::float8);

-- name: event_listener_unregister
SELECT jobqueue.unregister_event_listener(%(listener_id)s);
