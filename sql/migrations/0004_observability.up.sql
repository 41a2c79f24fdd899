-- Observability: what workers report (per-worker, per-queue, per-job-type counters and a
-- processing-time histogram, flushed every few seconds from memory — never a write per job), each
-- worker's utilization, and a partial index that lets /metrics count jobs waiting for a retry
-- without visiting the heap.

-- Bucket upper bounds (ms) of jobqueue_worker_processing_time_ms. Workers and the collector both
-- read them from here (jobqueue.store.metrics mirrors them), so a row's counts always mean the same.
CREATE FUNCTION jobqueue.duration_bucket_bounds() RETURNS double precision[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT '{1,2.5,5,10,25,50,100,250,500,1000,2500,5000,10000,30000,60000}'::double precision[]
$$;

CREATE TABLE jobqueue.worker_stats (
    worker_id         text             NOT NULL,
    queue             text             NOT NULL,
    job_type          text             NOT NULL,
    processed         bigint           NOT NULL DEFAULT 0,
    failed            bigint           NOT NULL DEFAULT 0,
    duration_ms_sum   double precision NOT NULL DEFAULT 0,
    duration_buckets  bigint[]         NOT NULL DEFAULT '{}',
    updated_at        timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (worker_id, queue, job_type)
);
COMMENT ON TABLE jobqueue.worker_stats IS 'Attempts finished per worker, queue and job type (processed = every finished attempt, failed = those that raised), with a processing-time histogram: duration_buckets[i] counts attempts of at most duration_bucket_bounds()[i] ms (the last one: longer). Workers add their deltas every few seconds; rows of workers that are gone are folded into worker_id ''(retired)'' so the totals never go down.';

-- Element-wise sum of two bucket arrays (missing elements count as 0), and the aggregate over rows.
CREATE FUNCTION jobqueue.add_buckets(a bigint[], b bigint[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(array_agg(coalesce(x, 0) + coalesce(y, 0) ORDER BY i), '{}')
    FROM unnest(a, b) WITH ORDINALITY AS t(x, y, i)
$$;

CREATE AGGREGATE jobqueue.sum_buckets(bigint[]) (
    SFUNC = jobqueue.add_buckets,
    STYPE = bigint[],
    INITCOND = '{}'
);

-- Adds deltas (a JSON array of {queue, job_type, processed, failed, duration_ms_sum, buckets}) to
-- one worker's rows: what a worker flushes, and what retiring folds into '(retired)'.
CREATE FUNCTION jobqueue.add_worker_stats(worker text, deltas jsonb, at timestamptz) RETURNS void
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

-- Utilization: share of the worker's slots busy over its last stats interval, and the running
-- total of busy slot-seconds (a counter: rate(busy_seconds) / concurrency is utilization too).
ALTER TABLE jobqueue.workers
    ADD COLUMN utilization  real             NOT NULL DEFAULT 0,
    ADD COLUMN busy_seconds double precision NOT NULL DEFAULT 0;

-- Jobs waiting for their retry, by queue and priority: only rows in state 'failed' are in it, so
-- claims and acks (pending -> processing -> completed) never touch it.
CREATE INDEX jobs_retry_wait_idx ON jobqueue.jobs (queue, priority) WHERE state = 'failed';
