-- Runtime queries on jobqueue.event_listeners: API processes and waiting clients streaming job
-- events register while they LISTEN, so the job-event triggers only build and send events while
-- someone reads them. Through functions (migration 0019): producer roles may register without
-- any right on the table.

-- name: event_listener_register
-- Register (or refresh) a listener for %(ttl)s seconds; rows that expired long ago are removed.
SELECT jobqueue.register_event_listener(%(listener_id)s, %(ttl)s::float8);

-- name: event_listener_unregister
SELECT jobqueue.unregister_event_listener(%(listener_id)s);

-- name: event_jobs
-- The rows behind job-event notifications. Any login may NOTIFY jobqueue_events, so the event
-- hub fans out only what these rows bear out (jobqueue.events.hub.confirms), under their own
-- queue and producer. Row-level security applies: a producer reads only its own jobs.
SELECT j.id, j.state, j.attempts, j.queue, j.producer_id, j.updated_at,
       j.updated_at > now() - make_interval(secs => %(recent_seconds)s) AS recent
FROM jobqueue.jobs j
WHERE j.id = ANY(%(ids)s::uuid[]);
