-- What /metrics and the dashboard read, and what workers write for them (jobqueue.worker_stats).
-- Nothing here counts the whole job table: the job counts walk the partial indexes over live
-- states (jobs_claim_idx, jobs_lease_idx, jobs_retry_wait_idx, jobs_dead_letter_idx), so finished
-- rows cost nothing, and every count stops at %(cap)s rows.

-- name: metrics_queue_counts
-- Per queue and priority: runnable now (pending, or failed whose retry time has come), scheduled
-- (run_at still ahead: delayed jobs and retries not yet due), waiting for a retry (state failed),
-- processing (with the start of the oldest running attempt and how far the most overdue one is
-- past its deadline), and the oldest runnable job's run_at. Queues are found by a skip scan of
-- jobs_claim_idx (one index probe per distinct queue), plus queues with processing jobs and
-- queues that running workers serve.
WITH RECURSIVE live_queues AS (
    (SELECT j.queue FROM jobqueue.jobs j WHERE j.state IN ('pending', 'failed') ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM jobqueue.jobs j
            WHERE j.state IN ('pending', 'failed') AND j.queue > l.queue
            ORDER BY j.queue LIMIT 1)
    FROM live_queues l
    WHERE l.queue IS NOT NULL
), processing AS (
    SELECT j.queue, j.priority, count(*) AS n, min(j.started_at) AS oldest_started_at,
           max(coalesce(%(now)s::timestamptz, now()) - j.deadline_at) AS overdue
    FROM jobqueue.jobs j
    WHERE j.locked_until IS NOT NULL AND j.state = 'processing'
    GROUP BY j.queue, j.priority
), queues AS (
    SELECT queue FROM live_queues WHERE queue IS NOT NULL
    UNION SELECT queue FROM processing
    UNION SELECT unnest(w.queues) FROM jobqueue.workers w
          WHERE w.status IN ('running', 'stopping')
            AND w.last_heartbeat >= coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(stale_seconds)s)
)
SELECT q.queue, p.level AS priority,
       (SELECT count(*) FROM (
            SELECT 1 FROM jobqueue.jobs j
            WHERE j.state IN ('pending', 'failed') AND j.queue = q.queue AND j.priority = p.level
              AND j.run_at <= coalesce(%(now)s::timestamptz, now())
            LIMIT %(cap)s) c) AS runnable,
       (SELECT count(*) FROM (
            SELECT 1 FROM jobqueue.jobs j
            WHERE j.state IN ('pending', 'failed') AND j.queue = q.queue AND j.priority = p.level
              AND j.run_at > coalesce(%(now)s::timestamptz, now())
            LIMIT %(cap)s) c) AS scheduled,
       (SELECT count(*) FROM (
            SELECT 1 FROM jobqueue.jobs j
            WHERE j.state = 'failed' AND j.queue = q.queue AND j.priority = p.level
            LIMIT %(cap)s) c) AS retrying,
       coalesce(pr.n, 0) AS processing, pr.oldest_started_at,
       greatest(extract(epoch FROM pr.overdue), 0)::float8 AS overdue_seconds,
       (SELECT j.run_at FROM jobqueue.jobs j
        WHERE j.state IN ('pending', 'failed') AND j.queue = q.queue AND j.priority = p.level
          AND j.run_at <= coalesce(%(now)s::timestamptz, now())
        ORDER BY j.run_at LIMIT 1) AS oldest_run_at,
       coalesce(%(now)s::timestamptz, now()) AS measured_at
FROM queues q
CROSS JOIN generate_series(0, 3) AS p(level)
LEFT JOIN processing pr ON pr.queue = q.queue AND pr.priority = p.level
ORDER BY q.queue, p.level;

-- name: metrics_dead_letters
-- Dead-lettered jobs per queue and job type, an index-only walk of jobs_dead_letter_idx.
SELECT d.queue, d.job_type, count(*) AS dead
FROM (SELECT j.queue, j.job_type FROM jobqueue.jobs j WHERE j.state = 'dead_letter' LIMIT %(cap)s) d
GROUP BY d.queue, d.job_type
ORDER BY d.queue, d.job_type;

-- name: metrics_submitted
-- Jobs ever submitted: the identity sequence behind jobs.seq (free to read, monotonic; a rolled
-- back enqueue still used up its number).
SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence('jobqueue.jobs', 'seq')::regclass), 0) AS submitted;

-- name: metrics_worker_totals
-- What workers reported, summed over workers (the '(retired)' row keeps the totals of workers
-- that are gone), per queue and job type; shed is written by job_fail_many itself.
SELECT s.queue, s.job_type, sum(s.processed)::bigint AS processed, sum(s.failed)::bigint AS failed,
       sum(s.duration_ms_sum) AS duration_ms_sum, jobqueue.sum_buckets(s.duration_buckets) AS buckets,
       sum(s.shed)::bigint AS shed
FROM jobqueue.worker_stats s
GROUP BY s.queue, s.job_type
ORDER BY s.queue, s.job_type;

-- name: metrics_workers
-- Registered workers seen in the last hour (older stopped rows are history), the live ones first
-- (so a churn of stopped workers never pushes a live one past the limit), newest first;
-- alive = running or stopping with a heartbeat within %(stale_seconds)s.
SELECT w.id, w.host, w.pid, w.queues, w.concurrency, w.status, w.jobs_processed, w.jobs_failed,
       w.utilization, w.busy_seconds, w.started_at, w.last_heartbeat, w.stuck_handlers,
       (w.status IN ('running', 'stopping')
        AND w.last_heartbeat >= coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(stale_seconds)s)) AS alive
FROM jobqueue.workers w
WHERE w.status IN ('running', 'stopping')
   OR w.last_heartbeat >= coalesce(%(now)s::timestamptz, now()) - interval '1 hour'
ORDER BY alive DESC, w.started_at DESC
LIMIT %(limit)s;

-- name: worker_stats_flush
-- A worker adds what it counted since its last flush (one row per queue and job type, as a JSON
-- array) and sets its utilization, in one statement every few seconds.
WITH load AS (
    UPDATE jobqueue.workers
    SET utilization = %(utilization)s, busy_seconds = busy_seconds + %(busy_seconds)s
    WHERE id = %(worker_id)s
    RETURNING id
)
SELECT jobqueue.add_worker_stats(%(worker_id)s, %(rows)s::jsonb, coalesce(%(now)s::timestamptz, now()));

-- name: worker_stats_retire
-- Fold the rows of a worker that stopped (%(worker_id)s) and of workers silent for longer than
-- %(older_than_seconds)s into the '(retired)' row, keeping every total: the table stays one row per
-- live worker and type. SKIP LOCKED: two workers retiring at once never wait on each other.
WITH gone AS (
    DELETE FROM jobqueue.worker_stats s
    WHERE (s.worker_id, s.queue, s.job_type) IN (
        SELECT o.worker_id, o.queue, o.job_type FROM jobqueue.worker_stats o
        WHERE o.worker_id <> '(retired)'
          AND (o.worker_id = %(worker_id)s
               OR o.updated_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(older_than_seconds)s))
        FOR UPDATE SKIP LOCKED)
    RETURNING s.queue, s.job_type, s.processed, s.failed, s.duration_ms_sum, s.duration_buckets, s.shed
), folded AS (
    SELECT g.queue, g.job_type, sum(g.processed) AS processed, sum(g.failed) AS failed,
           sum(g.duration_ms_sum) AS duration_ms_sum, jobqueue.sum_buckets(g.duration_buckets) AS buckets,
           sum(g.shed) AS shed
    FROM gone g
    GROUP BY g.queue, g.job_type
)
SELECT jobqueue.add_worker_stats('(retired)', coalesce(jsonb_agg(to_jsonb(f)), '[]'::jsonb),
                                 coalesce(%(now)s::timestamptz, now()))
FROM folded f;

-- name: metrics_bucket_bounds
SELECT jobqueue.duration_bucket_bounds() AS bounds;
