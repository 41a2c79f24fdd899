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
-- At worker start: app %(app)s's tasks (%(encrypted_fields)s: one JSON array of dotted field names
-- per job type, as text[] cannot nest). The app's own declarations (task_declarations) are
-- replaced, those of job types it no longer has removed. A job type's max_attempts is written when
-- it is new, when this app declared it, or when the app that did has no live worker (running or
-- stopping, a heartbeat within three of its intervals: this app takes it over), as limit_sync does;
-- one a live other app declared otherwise is left, and returned (the worker logs it). Its
-- encrypted_fields are the union of every app's declaration, so no app's start narrows what
-- producers seal for another's task.
WITH live_apps AS (
    SELECT DISTINCT w.app FROM jobqueue.workers w
    WHERE w.app IS NOT NULL AND w.app <> %(app)s AND w.status IN ('running', 'stopping')
      AND w.last_heartbeat >= now() - make_interval(secs => 3 * w.heartbeat_interval)
), wanted AS (
    SELECT t.job_type, t.max_attempts, ARRAY(SELECT jsonb_array_elements_text(t.encrypted::jsonb)) AS fields
    FROM unnest(%(job_types)s::text[], %(max_attempts)s::integer[], %(encrypted_fields)s::text[])
         AS t(job_type, max_attempts, encrypted)
), mine AS (
    INSERT INTO jobqueue.task_declarations AS d (job_type, app, encrypted_fields)
    SELECT w.job_type, %(app)s, w.fields FROM wanted w
    ON CONFLICT (job_type, app) DO UPDATE SET encrypted_fields = excluded.encrypted_fields, updated_at = now()
    WHERE d.encrypted_fields IS DISTINCT FROM excluded.encrypted_fields
), dropped AS (
    DELETE FROM jobqueue.task_declarations d
    WHERE d.app = %(app)s AND d.job_type <> ALL (%(job_types)s::text[])
    RETURNING d.job_type
), touched AS (  -- every job type whose union may change, with its fields from the other apps
    SELECT k.job_type,
           ARRAY(SELECT DISTINCT f FROM jobqueue.task_declarations o, unnest(o.encrypted_fields) AS f
                 WHERE o.job_type = k.job_type AND o.app <> %(app)s
                 UNION
                 SELECT unnest(w.fields) FROM wanted w WHERE w.job_type = k.job_type
                 ORDER BY 1) AS fields
    FROM (SELECT job_type FROM wanted UNION SELECT job_type FROM dropped) AS k
), declared AS (
    INSERT INTO jobqueue.task_defaults AS t (job_type, max_attempts, encrypted_fields, declared_by, updated_at)
    SELECT w.job_type, w.max_attempts, k.fields, %(app)s, now() FROM wanted w JOIN touched k USING (job_type)
    ON CONFLICT (job_type) DO UPDATE
    SET max_attempts = CASE WHEN t.declared_by = %(app)s OR t.declared_by NOT IN (SELECT app FROM live_apps)
                            THEN excluded.max_attempts ELSE t.max_attempts END,
        declared_by = CASE WHEN t.declared_by = %(app)s OR t.declared_by NOT IN (SELECT app FROM live_apps)
                           THEN excluded.declared_by ELSE t.declared_by END,
        encrypted_fields = excluded.encrypted_fields, updated_at = now()
    WHERE (t.max_attempts, t.declared_by, t.encrypted_fields)
          IS DISTINCT FROM (excluded.max_attempts, excluded.declared_by, excluded.encrypted_fields)
), narrowed AS (  -- job types this app no longer has: what the other apps still encrypt
    UPDATE jobqueue.task_defaults t SET encrypted_fields = k.fields, updated_at = now()
    FROM touched k
    WHERE k.job_type = t.job_type AND k.job_type NOT IN (SELECT job_type FROM wanted)
      AND t.encrypted_fields IS DISTINCT FROM k.fields
)
-- (Every data-modifying CTE above runs to completion whether this reads it or not.)
SELECT 'task' AS what, t.job_type, t.declared_by
FROM jobqueue.task_defaults t JOIN wanted w USING (job_type)
WHERE t.declared_by <> %(app)s AND t.declared_by IN (SELECT app FROM live_apps)
  AND t.max_attempts <> w.max_attempts
ORDER BY t.job_type;

-- name: task_encrypted_fields
-- The job types whose tasks declared encrypted payload fields, and those fields (producers cache it).
SELECT job_type, encrypted_fields FROM jobqueue.task_defaults WHERE cardinality(encrypted_fields) > 0;
