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

-- Utilization: share of the worker's slots busy over its last stats interval, and the running
-- total of busy slot-seconds (a counter: rate(busy_seconds) / concurrency is utilization too).
ALTER TABLE jobqueue.workers
    ADD COLUMN utilization  real             NOT NULL DEFAULT 0,
    ADD COLUMN busy_seconds double precision NOT NULL DEFAULT 0;

-- Jobs waiting for their retry, by queue and priority: only rows in state 'failed' are in it, so
-- claims and acks (pending -> processing -> completed) never touch it.
CREATE INDEX jobs_retry_wait_idx ON jobqueue.jobs (queue, priority) WHERE state = 'failed';
