-- The benchmark (jobqueue bench, jobqueue/bench/). Everything it writes is its own: jobs of its
-- queue (a random `bench-…` name) with their results, errors and idempotency keys, that queue's
-- settings/retention rows, its workers' registry and stats rows, its task's default row, its API
-- key, and the raw baseline's schema. Nothing else is read for writing, and every delete below is
-- bounded to those.

-- ---------------------------------------------------------------------------------------------
-- The server and its cumulative statistics (read-only).

-- name: bench_server_settings
SELECT current_setting('server_version'), current_setting('server_version_num')::integer,
       current_setting('fsync'), current_setting('synchronous_commit'), current_setting('full_page_writes'),
       current_setting('shared_buffers');

-- name: bench_data_directory
-- Where pg_waldump finds the WAL (needs superuser or pg_read_all_settings), and the timeline.
SELECT current_setting('data_directory'), (SELECT timeline_id FROM pg_control_checkpoint());

-- name: bench_wal_position
SELECT pg_current_wal_insert_lsn()::text, pg_current_wal_flush_lsn()::text;

-- name: bench_checkpoints
SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter;

-- name: bench_table_counters
-- Row versions written per table of a schema (cumulative), and how often autovacuum ran on it.
SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, autovacuum_count, autoanalyze_count
FROM pg_stat_user_tables
WHERE schemaname = %(schema)s
ORDER BY relname;

-- name: bench_stats_flush
-- PostgreSQL 15+: this session's pending counters are written when it next goes idle.
SELECT pg_stat_force_next_flush();

-- name: bench_table_sizes
-- Heap (main fork) and all indexes of one table, in bytes.
SELECT pg_relation_size(%(table)s::regclass), pg_indexes_size(%(table)s::regclass);

-- name: bench_index_sizes
SELECT indexrelid::regclass::text, pg_relation_size(indexrelid)
FROM pg_index
WHERE indrelid = %(table)s::regclass
ORDER BY 1;

-- name: bench_hold_snapshot
-- Run inside a REPEATABLE READ transaction: takes the snapshot that then holds the xmin horizon.
SELECT count(*) FROM jobqueue.leaders;

-- ---------------------------------------------------------------------------------------------
-- jobqueue, through its public SQL interface and read-outs of the bench's own queue.

-- name: bench_sql_enqueue
-- What a service writes in its own SQL: one job, one statement.
SELECT jobqueue.enqueue(%(job_type)s, %(payload)s::jsonb, queue => %(queue)s);

-- name: bench_sql_enqueue_many
SELECT count(*) FROM jobqueue.enqueue_many(%(jobs)s::jsonb);

-- name: bench_completed_count
SELECT count(*) FROM jobqueue.jobs WHERE queue = %(queue)s AND state = 'completed';

-- name: bench_drain_span
-- First claim to last ack of the completed jobs: the drain, without worker start-up.
SELECT min(started_at), max(finished_at) FROM jobqueue.jobs WHERE queue = %(queue)s AND state = 'completed';

-- name: bench_finish_tenths
-- Completion times at 0, 10, 90 and 100 %% of the drained jobs: claims/s over the first and the
-- last tenth of the drain.
SELECT count(*), percentile_disc(ARRAY[0, 0.1, 0.9, 1]) WITHIN GROUP (ORDER BY finished_at)
FROM jobqueue.jobs
WHERE queue = %(queue)s AND state = 'completed';

-- name: bench_exactly_once
-- (jobs completed on their first attempt, result rows, jobs): the first equal to the last means
-- every job ran once.
SELECT count(*) FILTER (WHERE j.state = 'completed' AND j.attempts = 1), count(r.job_id), count(*)
FROM jobqueue.jobs j LEFT JOIN jobqueue.job_results r ON r.job_id = j.id
WHERE j.queue = %(queue)s;

-- name: bench_claimed_at
SELECT id, started_at FROM jobqueue.jobs WHERE id = ANY(%(ids)s::uuid[]) AND state = 'completed';

-- name: bench_workers_running
SELECT count(*) FROM jobqueue.workers WHERE queues = ARRAY[%(queue)s]::text[] AND status = 'running';

-- name: bench_vacuum
-- Before each drain, so both queues start from fresh statistics and no dead rows.
VACUUM ANALYZE jobqueue.jobs;

-- name: bench_vacuum_after_prune
-- The pruned jobs' results and errors (jobqueue.jobs is the Vacuumer's).
VACUUM jobqueue.job_results, jobqueue.job_errors;

-- name: bench_vacuum_count
-- VACUUMs of jobqueue.jobs so far, manual and auto.
SELECT vacuum_count + autovacuum_count FROM pg_stat_user_tables WHERE relid = 'jobqueue.jobs'::regclass;

-- name: bench_set_retention
-- The bench queue keeps nothing once finished, so the Pruner takes all of its jobs.
INSERT INTO jobqueue.queue_retention (queue, completed, cancelled, dead_letter)
VALUES (%(queue)s, interval '0', interval '0', interval '0')
ON CONFLICT (queue) DO UPDATE SET completed = interval '0', cancelled = interval '0', dead_letter = interval '0';

-- name: bench_delete_queue
WITH results AS (
    DELETE FROM jobqueue.job_results r USING jobqueue.jobs j WHERE j.id = r.job_id AND j.queue = %(queue)s
), errors AS (
    DELETE FROM jobqueue.job_errors e USING jobqueue.jobs j WHERE j.id = e.job_id AND j.queue = %(queue)s
), keys AS (
    DELETE FROM jobqueue.idempotency_keys k USING jobqueue.jobs j
    WHERE j.queue = %(queue)s AND k.producer = coalesce(j.producer_id, '') AND k.key = j.idempotency_key
)
DELETE FROM jobqueue.jobs WHERE queue = %(queue)s;

-- name: bench_delete_queue_rows
-- The bench queue's settings (pause) and retention rows, its workers' registry and stats rows.
WITH settings AS (
    DELETE FROM jobqueue.queue_settings WHERE queue = %(queue)s
), retention AS (
    DELETE FROM jobqueue.queue_retention WHERE queue = %(queue)s
), stats AS (
    DELETE FROM jobqueue.worker_stats WHERE queue = %(queue)s
)
DELETE FROM jobqueue.workers WHERE queues = ARRAY[%(queue)s]::text[];

-- name: bench_delete_task_default
WITH declarations AS (
    DELETE FROM jobqueue.task_declarations WHERE job_type = %(job_type)s
)
DELETE FROM jobqueue.task_defaults WHERE job_type = %(job_type)s;

-- name: bench_delete_api_key
DELETE FROM jobqueue.api_keys WHERE id = %(id)s;

-- ---------------------------------------------------------------------------------------------
-- The raw baseline (jobqueue/bench/raw.py): what a competent engineer writes in an afternoon.
-- One table in a schema of its own, a partial index for the runnable rows, a NOTIFY per insert
-- statement, a single-row INSERT, COPY for bulk, one SKIP LOCKED claim and one UPDATE ack per
-- batch. No leases, results, errors, events or metrics.

-- name: bench_raw_exists
SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = 'jobqueue_bench_raw');

-- name: bench_raw_create_schema
CREATE SCHEMA jobqueue_bench_raw;

-- name: bench_raw_create_table
CREATE TABLE jobqueue_bench_raw.jobs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue text NOT NULL,
    job_type text NOT NULL,
    payload jsonb NOT NULL DEFAULT '{}',
    priority smallint NOT NULL DEFAULT 2,
    state text NOT NULL DEFAULT 'pending',
    run_at timestamptz NOT NULL DEFAULT now(),
    created_at timestamptz NOT NULL DEFAULT now(),
    claimed_at timestamptz,
    finished_at timestamptz
);

-- name: bench_raw_create_index
CREATE INDEX jobs_runnable ON jobqueue_bench_raw.jobs (queue, priority, run_at, id) WHERE state = 'pending';

-- name: bench_raw_create_notify
CREATE FUNCTION jobqueue_bench_raw.notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('jobqueue_bench_raw', '');
    RETURN NULL;
END $$;

-- name: bench_raw_create_trigger
CREATE TRIGGER jobs_notify AFTER INSERT ON jobqueue_bench_raw.jobs
FOR EACH STATEMENT EXECUTE FUNCTION jobqueue_bench_raw.notify();

-- name: bench_raw_drop
DROP SCHEMA jobqueue_bench_raw CASCADE;

-- name: bench_raw_listen
LISTEN jobqueue_bench_raw;

-- name: bench_raw_enqueue
INSERT INTO jobqueue_bench_raw.jobs (queue, job_type, payload)
VALUES (%(queue)s, %(job_type)s, %(payload)s::jsonb)
RETURNING id;

-- name: bench_raw_copy
COPY jobqueue_bench_raw.jobs (queue, job_type, payload) FROM STDIN;

-- name: bench_raw_claim
-- The ids in an array, so the update probes the primary key whatever the statistics say (as a
-- join, a freshly loaded table's statistics can make it hash-join a sequential scan).
UPDATE jobqueue_bench_raw.jobs
SET state = 'running', claimed_at = now()
WHERE id = ANY(ARRAY(
    SELECT id FROM jobqueue_bench_raw.jobs
    WHERE state = 'pending' AND queue = %(queue)s AND run_at <= now()
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED))
RETURNING id, job_type, payload;

-- name: bench_raw_ack
UPDATE jobqueue_bench_raw.jobs SET state = 'done', finished_at = now() WHERE id = ANY(%(ids)s::bigint[]);

-- name: bench_raw_delete_all
DELETE FROM jobqueue_bench_raw.jobs;

-- name: bench_raw_prune
WITH gone AS (DELETE FROM jobqueue_bench_raw.jobs WHERE state = 'done' RETURNING 1)
SELECT count(*) FROM gone;

-- name: bench_raw_vacuum
VACUUM ANALYZE jobqueue_bench_raw.jobs;

-- name: bench_raw_drain_span
SELECT count(*) FILTER (WHERE state = 'done'), min(claimed_at), max(finished_at)
FROM jobqueue_bench_raw.jobs;

-- name: bench_raw_finish_tenths
SELECT count(*), percentile_disc(ARRAY[0, 0.1, 0.9, 1]) WITHIN GROUP (ORDER BY finished_at)
FROM jobqueue_bench_raw.jobs
WHERE state = 'done';

-- name: bench_raw_exactly_once
-- (jobs done, jobs): a job is done once or it is not done (no attempts are counted in the raw queue).
SELECT count(*) FILTER (WHERE state = 'done'), count(*) FROM jobqueue_bench_raw.jobs;

-- name: bench_raw_claimed_at
SELECT id, claimed_at FROM jobqueue_bench_raw.jobs WHERE id = ANY(%(ids)s::bigint[]) AND claimed_at IS NOT NULL;
