-- Observability: undo 0004_observability.up.sql.
DROP INDEX IF EXISTS jobqueue.jobs_retry_wait_idx;
ALTER TABLE jobqueue.workers DROP COLUMN IF EXISTS busy_seconds, DROP COLUMN IF EXISTS utilization;
DROP FUNCTION IF EXISTS jobqueue.add_worker_stats(text, jsonb, timestamptz);
DROP AGGREGATE IF EXISTS jobqueue.sum_buckets(bigint[]);
DROP FUNCTION IF EXISTS jobqueue.add_buckets(bigint[], bigint[]);
DROP TABLE IF EXISTS jobqueue.worker_stats;
DROP FUNCTION IF EXISTS jobqueue.duration_bucket_bounds();
