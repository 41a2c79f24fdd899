ALTER TABLE jobqueue.workers DROP CONSTRAINT workers_concurrency_bounds,
    DROP COLUMN concurrency_target, DROP COLUMN concurrency_min;
DROP FUNCTION jobqueue.runnable_depth(text, bigint);

CREATE OR REPLACE FUNCTION jobqueue.add_worker_stats(worker text, deltas jsonb, at timestamptz) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO jobqueue.worker_stats AS s
        (worker_id, queue, job_type, processed, failed, duration_ms_sum, duration_buckets, updated_at)
    SELECT worker, d.queue, d.job_type, d.processed, d.failed, d.duration_ms_sum, d.buckets, at
    FROM jsonb_to_recordset(deltas)
        AS d(queue text, job_type text, processed bigint, failed bigint, duration_ms_sum double precision,
             buckets bigint[])
    ON CONFLICT (worker_id, queue, job_type) DO UPDATE
    SET processed = s.processed + EXCLUDED.processed,
        failed = s.failed + EXCLUDED.failed,
        duration_ms_sum = s.duration_ms_sum + EXCLUDED.duration_ms_sum,
        duration_buckets = jobqueue.add_buckets(s.duration_buckets, EXCLUDED.duration_buckets),
        updated_at = EXCLUDED.updated_at
$$;
ALTER TABLE jobqueue.worker_stats DROP COLUMN shed;

-- A shed dead letter has no reason the older schema knows: it keeps state dead_letter, reason unknown.
UPDATE jobqueue.jobs SET dead_reason = NULL WHERE dead_reason = 'shed';
ALTER TABLE jobqueue.jobs DROP CONSTRAINT jobs_dead_reason_known,
    ADD CONSTRAINT jobs_dead_reason_known
        CHECK (dead_reason IN ('attempts_exhausted', 'permanent_error', 'expired'));
COMMENT ON COLUMN jobqueue.jobs.dead_reason IS 'Why a dead_letter job died: attempts_exhausted, permanent_error or expired.';

ALTER TABLE jobqueue.queue_settings DROP COLUMN shed_low_retries;
