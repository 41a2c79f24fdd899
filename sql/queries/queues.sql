-- Runtime queries on queues: statistics, waiting jobs for backpressure and the enqueue gates
-- (jobqueue.queue_gates), per-queue settings
-- (jobqueue.queue_settings: paused flag, limits, the job TTL and idempotency window that
-- enqueue applies, and whether low-priority retries are shed above the soft limit). Changing a setting NOTIFYs jobqueue_control
-- (a trigger), so workers re-read the paused queues at once.

-- name: queue_stats
-- Per queue and priority, from the jobqueue.queue_stats view, plus each queue's settings (a
-- paused queue without jobs is listed too, with a NULL priority).
SELECT coalesce(s.queue, q.queue) AS queue, s.priority, s.pending, s.scheduled, s.processing, s.failed,
       s.dead, s.oldest_runnable_age_seconds, coalesce(q.paused, false), q.soft_limit, q.hard_limit,
       q.job_ttl, q.idempotency_window, coalesce(q.shed_low_retries, false)
FROM jobqueue.queue_stats s
FULL JOIN jobqueue.queue_settings q ON q.queue = s.queue
ORDER BY 1, jobqueue.priority_level(coalesce(s.priority, 'critical'));

-- name: queue_waiting_counts
-- Waiting jobs per queue — pending (due or scheduled for later) or waiting for a retry: what
-- backpressure and the gates count, since every one of them is stored — each count capped at
-- %(cap)s, and whether a live worker serves the queue (heartbeat within %(stale_seconds)s).
-- A loose index scan over jobs_claim_idx finds the queues, then one probe per queue reads at most
-- %(cap)s entries of the queue's prefix of jobs_claim_idx: the cost is bounded however long a
-- backlog grows. Queues that live workers serve are listed too, with 0 when nothing waits.
WITH RECURSIVE found AS (
    (SELECT j.queue FROM jobqueue.jobs j WHERE j.state IN ('pending', 'failed') ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM jobqueue.jobs j
            WHERE j.state IN ('pending', 'failed') AND j.queue > f.queue ORDER BY j.queue LIMIT 1)
    FROM found f
    WHERE f.queue IS NOT NULL
), served AS (
    SELECT DISTINCT unnest(w.queues) AS queue FROM jobqueue.workers w
    WHERE w.status IN ('running', 'stopping')
      AND w.last_heartbeat >= now() - make_interval(secs => %(stale_seconds)s)
)
SELECT q.queue,
       (SELECT count(*) FROM (
            SELECT 1 FROM jobqueue.jobs j WHERE j.state IN ('pending', 'failed') AND j.queue = q.queue
            LIMIT %(cap)s) AS capped)::bigint AS waiting,
       q.queue IN (SELECT s.queue FROM served s) AS served
FROM (SELECT f.queue FROM found f WHERE f.queue IS NOT NULL UNION SELECT s.queue FROM served s) AS q;

-- name: queue_gates_replace
-- The maintenance leader's gatekeeper after a count: exactly these gates are closed now (a JSON
-- array of {queue, reason, waiting, quota}; '' is every queue), each until %(valid_for)s seconds
-- from now. Writes nothing while no gate is closed and none was.
WITH wanted AS (
    SELECT w.queue, w.reason, w.waiting, w.quota
    FROM jsonb_to_recordset(%(gates)s::jsonb) AS w(queue text, reason text, waiting bigint, quota bigint)
), opened AS (
    DELETE FROM jobqueue.queue_gates g
    WHERE NOT EXISTS (SELECT FROM wanted w WHERE w.queue = g.queue AND w.reason = g.reason)
    RETURNING g.queue, g.reason
), closed AS (
    INSERT INTO jobqueue.queue_gates AS g (queue, reason, waiting, quota, counted_at, until)
    SELECT w.queue, w.reason, w.waiting, w.quota, now(), now() + make_interval(secs => %(valid_for)s)
    FROM wanted w
    ON CONFLICT (queue, reason) DO UPDATE
    SET waiting = excluded.waiting, quota = excluded.quota, counted_at = excluded.counted_at, until = excluded.until
    RETURNING g.queue, g.reason, (xmax = 0) AS new
)
SELECT 'opened' AS change, o.queue, o.reason FROM opened o
UNION ALL
SELECT 'closed', c.queue, c.reason FROM closed c WHERE c.new;

-- name: queue_settings_all
SELECT queue, paused, soft_limit, hard_limit, job_ttl, idempotency_window, shed_low_retries
FROM jobqueue.queue_settings ORDER BY queue;

-- name: queue_paused_among
-- The worker's view: which of its queues are paused.
SELECT queue FROM jobqueue.queue_settings WHERE paused AND queue = ANY(%(queues)s::text[]);

-- name: queue_set_paused
-- Pause or resume a queue this database knows: 'default', one an operator configured (a settings
-- row), one a worker ever served (served_names), or one holding jobs (waiting ones through
-- jobs_claim_idx, finished ones through jobs_finished_idx; a running job's queue has been served).
-- An unknown name (a misspelling, mostly) writes nothing and returns no row, unless %(force)s:
-- pausing a queue before its first worker starts is deliberate (recorded with forced true).
-- Each change of a queue's settings below is recorded in the audit log (queue.pause, queue.resume,
-- queue.limits, queue.defaults, queue.shedding), with the values set.
WITH changed AS (
    INSERT INTO jobqueue.queue_settings AS s (queue, paused)
    SELECT %(queue)s::text, %(paused)s::boolean
    WHERE %(force)s::boolean OR %(queue)s::text = 'default'
       OR EXISTS (SELECT FROM jobqueue.queue_settings k WHERE k.queue = %(queue)s::text)
       OR EXISTS (SELECT FROM jobqueue.served_names n WHERE n.kind = 'queue' AND n.name = %(queue)s::text)
       OR EXISTS (SELECT FROM jobqueue.jobs j WHERE j.state IN ('pending', 'failed') AND j.queue = %(queue)s::text)
       OR EXISTS (SELECT FROM jobqueue.jobs j
                  WHERE j.state IN ('completed', 'cancelled', 'dead_letter') AND j.queue = %(queue)s::text)
    ON CONFLICT (queue) DO UPDATE SET paused = excluded.paused, updated_at = now()
    RETURNING s.queue, s.paused, s.soft_limit, s.hard_limit, s.job_ttl, s.idempotency_window, s.shed_low_retries
)
SELECT c.queue, c.paused, c.soft_limit, c.hard_limit, c.job_ttl, c.idempotency_window, c.shed_low_retries
FROM changed c CROSS JOIN LATERAL jobqueue.audit(CASE WHEN c.paused THEN 'queue.pause' ELSE 'queue.resume' END,
                                                 c.queue, CASE WHEN %(force)s::boolean
                                                               THEN '{"forced": true}'::jsonb
                                                               ELSE '{}'::jsonb END) AS recorded;

-- name: queue_known_names
-- What an enqueue may name without a warning: the queues and job types a worker ever served
-- (served_names), the queues an operator configured, 'default', and the job types a task declared
-- (task_defaults, synced at worker start). Anything else is likely a misspelling; the job is
-- accepted all the same (a producer may deploy before its workers), and the caller warns.
SELECT ARRAY(SELECT n.name FROM jobqueue.served_names n WHERE n.kind = 'queue'
             UNION SELECT k.queue FROM jobqueue.queue_settings k UNION SELECT 'default') AS queues,
       ARRAY(SELECT n.name FROM jobqueue.served_names n WHERE n.kind = 'job_type'
             UNION SELECT t.job_type FROM jobqueue.task_defaults t) AS job_types;

-- name: queue_set_limits
-- NULL limits fall back to the API's defaults (JOBQUEUE_API_SOFT_LIMIT / _HARD_LIMIT).
WITH changed AS (
    INSERT INTO jobqueue.queue_settings AS s (queue, soft_limit, hard_limit)
    VALUES (%(queue)s, %(soft_limit)s::integer, %(hard_limit)s::integer)
    ON CONFLICT (queue) DO UPDATE SET soft_limit = excluded.soft_limit, hard_limit = excluded.hard_limit, updated_at = now()
    RETURNING s.queue, s.paused, s.soft_limit, s.hard_limit, s.job_ttl, s.idempotency_window, s.shed_low_retries
)
SELECT c.queue, c.paused, c.soft_limit, c.hard_limit, c.job_ttl, c.idempotency_window, c.shed_low_retries
FROM changed c CROSS JOIN LATERAL jobqueue.audit('queue.limits', c.queue, jsonb_build_object(
    'soft_limit', c.soft_limit, 'hard_limit', c.hard_limit)) AS recorded;

-- name: queue_set_enqueue_defaults
-- What enqueue applies to this queue's jobs when the call gives none: job_ttl (expiry counted from
-- run_at; NULL: none) and idempotency_window (NULL: 24 hours). Jobs already enqueued keep theirs.
WITH changed AS (
    INSERT INTO jobqueue.queue_settings AS s (queue, job_ttl, idempotency_window)
    VALUES (%(queue)s, %(job_ttl)s::interval, %(idempotency_window)s::interval)
    ON CONFLICT (queue) DO UPDATE SET job_ttl = excluded.job_ttl, idempotency_window = excluded.idempotency_window,
                                      updated_at = now()
    RETURNING s.queue, s.paused, s.soft_limit, s.hard_limit, s.job_ttl, s.idempotency_window, s.shed_low_retries
)
SELECT c.queue, c.paused, c.soft_limit, c.hard_limit, c.job_ttl, c.idempotency_window, c.shed_low_retries
FROM changed c CROSS JOIN LATERAL jobqueue.audit('queue.defaults', c.queue, jsonb_build_object(
    'job_ttl_seconds', extract(epoch FROM c.job_ttl),
    'idempotency_window_seconds', extract(epoch FROM c.idempotency_window))) AS recorded;

-- name: queue_set_shedding
-- Load shedding on retry (see job_fail_many): while on and the queue's runnable depth is above
-- its soft limit, a retryable failure of a low-priority job is dead-lettered (reason shed).
WITH changed AS (
    INSERT INTO jobqueue.queue_settings AS s (queue, shed_low_retries) VALUES (%(queue)s, %(shed_low_retries)s)
    ON CONFLICT (queue) DO UPDATE SET shed_low_retries = excluded.shed_low_retries, updated_at = now()
    RETURNING s.queue, s.paused, s.soft_limit, s.hard_limit, s.job_ttl, s.idempotency_window, s.shed_low_retries
)
SELECT c.queue, c.paused, c.soft_limit, c.hard_limit, c.job_ttl, c.idempotency_window, c.shed_low_retries
FROM changed c CROSS JOIN LATERAL jobqueue.audit('queue.shedding', c.queue, jsonb_build_object(
    'shed_low_retries', c.shed_low_retries)) AS recorded;

-- name: queue_load
-- The autoscaler's signals for the given queues: live workers serving each (running or stopping,
-- heartbeat within %(stale_seconds)s; the asking worker included) and its runnable depth,
-- counted only up to %(per_worker)s jobs per worker + 1 — enough to tell whether the depth per
-- worker is above the scale-up threshold, at a cost that does not grow with the backlog.
SELECT q.name, w.n AS workers, jobqueue.runnable_depth(q.name, %(per_worker)s * greatest(w.n, 1) + 1) AS runnable
FROM unnest(%(queues)s::text[]) AS q(name)
CROSS JOIN LATERAL (
    SELECT count(*) AS n FROM jobqueue.workers wk
    WHERE q.name = ANY(wk.queues) AND wk.status IN ('running', 'stopping')
      AND wk.last_heartbeat >= now() - make_interval(secs => %(stale_seconds)s)
) AS w;

-- name: queue_unserved
-- Jobs nobody serves: runnable jobs (pending, or failed and due) whose job type no live worker of
-- their queue has a handler for — workers running or stopping with a heartbeat within
-- %(stale_seconds)s, by the job types they registered (jobqueue.workers.job_types). No worker claims
-- them (a claim takes only its app's types): they wait, no attempt used, until one that can run them
-- starts. The (queue, job type) pairs with waiting jobs are found by a skip scan of
-- jobs_claim_type_idx, one descent per pair and at most %(max_pairs)s of them; each unserved pair
-- is counted per level up to %(cap)s (bounded by priority = level AND run_at <= now()), so the cost
-- does not grow with the backlog.
WITH RECURSIVE pairs AS (
    (SELECT j.queue, j.job_type, 1 AS n FROM jobqueue.jobs j
     WHERE j.state IN ('pending', 'failed') ORDER BY j.queue, j.job_type LIMIT 1)
    UNION ALL
    SELECT following.queue, following.job_type, p.n + 1
    FROM pairs p
    CROSS JOIN LATERAL (
        SELECT j.queue, j.job_type FROM jobqueue.jobs j
        WHERE j.state IN ('pending', 'failed') AND (j.queue, j.job_type) > (p.queue, p.job_type)
        ORDER BY j.queue, j.job_type LIMIT 1
    ) AS following
    WHERE p.n < %(max_pairs)s
), unserved AS (
    SELECT p.queue, p.job_type FROM pairs p
    WHERE NOT EXISTS (SELECT FROM jobqueue.workers w
                      WHERE w.status IN ('running', 'stopping')
                        AND w.last_heartbeat >= now() - make_interval(secs => %(stale_seconds)s)
                        AND p.queue = ANY(w.queues) AND p.job_type = ANY(w.job_types))
)
SELECT u.queue, u.job_type, sum(c.runnable)::bigint AS runnable
FROM unserved u
CROSS JOIN generate_series(0, 3) AS l(level)
CROSS JOIN LATERAL (
    SELECT count(*) AS runnable FROM (
        SELECT 1 FROM jobqueue.jobs j
        WHERE j.state IN ('pending', 'failed') AND j.queue = u.queue AND j.job_type = u.job_type
          AND j.priority = l.level AND j.run_at <= now()
        LIMIT %(cap)s
    ) AS capped
) AS c
GROUP BY u.queue, u.job_type
HAVING sum(c.runnable) > 0
ORDER BY u.queue, u.job_type;
