-- The worker registry (jobqueue.workers) and the per-type task defaults workers publish.

-- name: worker_register
INSERT INTO jobqueue.workers (id, host, pid, queues, concurrency, status, started_at, last_heartbeat)
VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s, %(concurrency)s, 'running', now(), now())
ON CONFLICT (id) DO UPDATE
SET host = EXCLUDED.host, pid = EXCLUDED.pid, queues = EXCLUDED.queues,
    concurrency = EXCLUDED.concurrency, status = 'running', last_heartbeat = now();

-- name: worker_heartbeat
UPDATE jobqueue.workers
SET last_heartbeat = now(), status = %(status)s,
    jobs_processed = jobs_processed + %(processed)s, jobs_failed = jobs_failed + %(failed)s
WHERE id = %(id)s
RETURNING id;

-- name: worker_deregister
UPDATE jobqueue.workers SET status = 'stopped', last_heartbeat = now() WHERE id = %(id)s;

-- name: task_defaults_sync
INSERT INTO jobqueue.task_defaults (job_type, max_attempts, updated_at)
SELECT t.job_type, t.max_attempts, now()
FROM unnest(%(job_types)s::text[], %(max_attempts)s::integer[]) AS t(job_type, max_attempts)
ON CONFLICT (job_type) DO UPDATE
SET max_attempts = EXCLUDED.max_attempts, updated_at = now()
WHERE task_defaults.max_attempts IS DISTINCT FROM EXCLUDED.max_attempts;
