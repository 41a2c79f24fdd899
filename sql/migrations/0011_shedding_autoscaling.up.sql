-- Load shedding on retry and concurrency autoscaling (issue 12).
--
-- 1. queue_settings.shed_low_retries (opt-in, default off): while the queue is above its soft
--    limit, a retryable failure of a `low` job is dead-lettered with dead_reason 'shed' instead
--    of being retried (job_fail_many; the attempt's error is still recorded).
-- 2. dead_reason gains 'shed'. The CHECK is replaced: a scan of jobqueue.jobs under the
--    migration's lock (every existing row passes; the new set only grows the old one).
-- 3. worker_stats.shed counts shed jobs per worker, queue and job type (written by the same
--    statement that sheds them; folded into '(retired)' like the other counters), so
--    /metrics has a counter that neither a retry of the dead letters nor pruning takes back.
-- 4. runnable_depth(queue, cap): the depth both of them measure — pending or failed jobs whose
--    run_at is due, what backpressure and jobqueue_queue_depth count — up to cap.
-- 5. workers.concurrency_min / concurrency_target: a worker started with --concurrency MIN:MAX
--    reports its bounds' lower end and the slot count its autoscaler chose (concurrency is MAX);
--    both NULL for a worker with a fixed concurrency.
ALTER TABLE jobqueue.queue_settings ADD COLUMN shed_low_retries boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN jobqueue.queue_settings.shed_low_retries IS 'Load shedding: while the queue''s runnable depth is above its soft limit, a retryable failure of a low-priority job is dead-lettered (reason shed) instead of retried.';

ALTER TABLE jobqueue.jobs DROP CONSTRAINT jobs_dead_reason_known,
    ADD CONSTRAINT jobs_dead_reason_known
        CHECK (dead_reason IN ('attempts_exhausted', 'permanent_error', 'expired', 'shed'));
COMMENT ON COLUMN jobqueue.jobs.dead_reason IS 'Why a dead_letter job died: attempts_exhausted, permanent_error, expired or shed (a low-priority retry dropped while its queue was above its soft limit).';

ALTER TABLE jobqueue.worker_stats ADD COLUMN shed bigint NOT NULL DEFAULT 0;
COMMENT ON COLUMN jobqueue.worker_stats.shed IS 'Retries of low-priority jobs this worker dead-lettered as shed (queue above its soft limit).';

-- Adds deltas (a JSON array of {queue, job_type, processed, failed, duration_ms_sum, buckets[,
-- shed]}) to one worker's rows: what a worker flushes, and what retiring folds into '(retired)'.
CREATE OR REPLACE FUNCTION jobqueue.add_worker_stats(worker text, deltas jsonb, at timestamptz) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO jobqueue.worker_stats AS s
        (worker_id, queue, job_type, processed, failed, duration_ms_sum, duration_buckets, shed, updated_at)
    SELECT worker, d.queue, d.job_type, d.processed, d.failed, d.duration_ms_sum, d.buckets, coalesce(d.shed, 0), at
    FROM jsonb_to_recordset(deltas)
        AS d(queue text, job_type text, processed bigint, failed bigint, duration_ms_sum double precision,
             buckets bigint[], shed bigint)
    ON CONFLICT (worker_id, queue, job_type) DO UPDATE
    SET processed = s.processed + EXCLUDED.processed,
        failed = s.failed + EXCLUDED.failed,
        duration_ms_sum = s.duration_ms_sum + EXCLUDED.duration_ms_sum,
        duration_buckets = jobqueue.add_buckets(s.duration_buckets, EXCLUDED.duration_buckets),
        shed = s.shed + EXCLUDED.shed,
        updated_at = EXCLUDED.updated_at
$$;

CREATE FUNCTION jobqueue.runnable_depth(queue_name text, cap bigint) RETURNS bigint
LANGUAGE sql STABLE AS $$
    -- One probe of jobs_claim_idx per priority level, bounded by run_at <= now() (jobs scheduled
    -- for later are never read) and by cap in all: the cost stays bounded however long the backlog.
    SELECT count(*) FROM (
        SELECT 1
        FROM generate_series(0, 3) AS p(level)
        CROSS JOIN LATERAL (
            SELECT 1 FROM jobqueue.jobs j
            WHERE j.state IN ('pending', 'failed') AND j.queue = queue_name AND j.priority = p.level
              AND j.run_at <= now()
            LIMIT cap) AS level_rows
        LIMIT cap) AS counted
$$;
COMMENT ON FUNCTION jobqueue.runnable_depth(text, bigint) IS 'Runnable jobs of a queue (pending or failed, run_at due), counted up to cap: the depth load shedding and autoscaling compare with their thresholds.';

ALTER TABLE jobqueue.workers
    ADD COLUMN concurrency_min integer,
    ADD COLUMN concurrency_target integer,
    ADD CONSTRAINT workers_concurrency_bounds
        CHECK (concurrency_min >= 1 AND concurrency_min <= concurrency
               AND concurrency_target >= concurrency_min AND concurrency_target <= concurrency);
COMMENT ON COLUMN jobqueue.workers.concurrency_min IS 'Autoscaling worker (--concurrency MIN:MAX): MIN; concurrency is MAX. NULL: a fixed concurrency.';
COMMENT ON COLUMN jobqueue.workers.concurrency_target IS 'Autoscaling worker: the slots its autoscaler grants now (between concurrency_min and concurrency). NULL: a fixed concurrency.';
