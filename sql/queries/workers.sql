-- The worker registry (jobqueue.workers) and the per-type task defaults workers publish.

-- name: worker_register
-- concurrency is the most slots the worker runs; an autoscaling one (--concurrency MIN:MAX) also
-- gives concurrency_min and its first concurrency_target (NULL both: a fixed concurrency).
-- job_types: the types its app has handlers for; app: that app's name (its declarations are its own).
INSERT INTO jobqueue.workers (id, host, pid, queues, concurrency, heartbeat_interval, status, started_at,
                              last_heartbeat, concurrency_min, concurrency_target, job_types, app)
VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s, %(concurrency)s, %(heartbeat_interval)s, 'running', now(), now(),
        %(concurrency_min)s, %(concurrency_target)s, %(job_types)s, %(app)s)
ON CONFLICT (id) DO UPDATE
SET host = EXCLUDED.host, pid = EXCLUDED.pid, queues = EXCLUDED.queues, concurrency = EXCLUDED.concurrency,
    heartbeat_interval = EXCLUDED.heartbeat_interval, status = 'running', last_heartbeat = now(),
    concurrency_min = EXCLUDED.concurrency_min, concurrency_target = EXCLUDED.concurrency_target,
    job_types = EXCLUDED.job_types, app = EXCLUDED.app;

-- name: worker_set_concurrency_target
-- An autoscaling worker's new slot count, written when its autoscaler changes it.
UPDATE jobqueue.workers SET concurrency_target = %(target)s WHERE id = %(id)s;

-- name: worker_heartbeat
-- Its own statement, apart from the lease renewal (a row lock that stalls the one must not stop
-- the other). leases_blocked: the jobs whose lease the worker's last renewal passed over because
-- another transaction held their row locked (see job_reclaim_expired).
UPDATE jobqueue.workers
SET last_heartbeat = now(), status = %(status)s, stuck_handlers = %(stuck_handlers)s,
    jobs_processed = jobs_processed + %(processed)s, jobs_failed = jobs_failed + %(failed)s,
    leases_blocked = %(leases_blocked)s::uuid[]
WHERE id = %(id)s
RETURNING id;

-- name: worker_deregister
UPDATE jobqueue.workers SET status = 'stopped', last_heartbeat = now() WHERE id = %(id)s;

-- name: worker_list
-- The registry as `GET /workers` and `jobqueue workers` show it: live workers first, then by start.
SELECT id, host, pid, queues, concurrency, status, jobs_processed, jobs_failed, started_at, last_heartbeat,
       heartbeat_interval, stuck_handlers, concurrency_min, concurrency_target, job_types, app
FROM jobqueue.workers
ORDER BY status IN ('running', 'stopping') DESC, started_at DESC, id;

-- name: worker_mark_lost
-- Workers that missed %(missed_beats)s heartbeats in a row (of their own interval) are lost: their
-- process died or hangs. A worker that beats again is 'running' again (worker_heartbeat).
UPDATE jobqueue.workers
SET status = 'lost'
WHERE status IN ('running', 'stopping')
  AND last_heartbeat < coalesce(%(now)s::timestamptz, now())
                       - make_interval(secs => heartbeat_interval * %(missed_beats)s)
RETURNING id, last_heartbeat;

-- name: worker_forget
-- Rows of workers lost or stopped longer ago than %(forget_after)s seconds are deleted.
DELETE FROM jobqueue.workers
WHERE status IN ('lost', 'stopped')
  AND last_heartbeat < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(forget_after)s)
RETURNING id;

-- name: task_defaults_sync
-- %(encrypted_fields)s: one JSON array of dotted field names per job type (text[] cannot nest).
INSERT INTO jobqueue.task_defaults (job_type, max_attempts, encrypted_fields, updated_at)
SELECT t.job_type, t.max_attempts, ARRAY(SELECT jsonb_array_elements_text(t.encrypted::jsonb)), now()
FROM unnest(%(job_types)s::text[], %(max_attempts)s::integer[], %(encrypted_fields)s::text[])
     AS t(job_type, max_attempts, encrypted)
ON CONFLICT (job_type) DO UPDATE
SET max_attempts = EXCLUDED.max_attempts, encrypted_fields = EXCLUDED.encrypted_fields, updated_at = now()
WHERE task_defaults.max_attempts IS DISTINCT FROM EXCLUDED.max_attempts
   OR task_defaults.encrypted_fields IS DISTINCT FROM EXCLUDED.encrypted_fields;

-- name: task_encrypted_fields
-- The job types whose tasks declared encrypted payload fields, and those fields (producers cache it).
SELECT job_type, encrypted_fields FROM jobqueue.task_defaults WHERE cardinality(encrypted_fields) > 0;
