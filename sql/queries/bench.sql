-- The benchmark's reads and clean-up (jobqueue bench). Every query is bounded to the benchmark's
-- own queue, which it creates with a random name and deletes afterwards.

-- name: bench_server_settings
SELECT current_setting('fsync'), current_setting('synchronous_commit');

-- name: bench_completed_count
SELECT count(*) FROM jobqueue.jobs WHERE queue = %(queue)s AND state = 'completed';

-- name: bench_drain_span
-- First claim to last ack of the completed jobs: the drain, without worker start-up.
SELECT min(started_at), max(finished_at) FROM jobqueue.jobs WHERE queue = %(queue)s AND state = 'completed';

-- name: bench_exactly_once
-- (jobs completed on their first attempt, result rows, jobs): all three equal means exactly once.
SELECT count(*) FILTER (WHERE j.state = 'completed' AND j.attempts = 1), count(r.job_id), count(*)
FROM jobqueue.jobs j LEFT JOIN jobqueue.job_results r ON r.job_id = j.id
WHERE j.queue = %(queue)s;

-- name: bench_claimed_at
SELECT id, started_at FROM jobqueue.jobs WHERE id = ANY(%(ids)s::uuid[]) AND state = 'completed';

-- name: bench_delete_queue
WITH results AS (
    DELETE FROM jobqueue.job_results r USING jobqueue.jobs j WHERE j.id = r.job_id AND j.queue = %(queue)s
), keys AS (
    DELETE FROM jobqueue.idempotency_keys k USING jobqueue.jobs j
    WHERE j.queue = %(queue)s AND k.producer = coalesce(j.producer_id, '') AND k.key = j.idempotency_key
)
DELETE FROM jobqueue.jobs WHERE queue = %(queue)s;

-- name: bench_hold_snapshot
-- Run inside a REPEATABLE READ transaction: takes the snapshot that then holds the xmin horizon.
SELECT count(*) FROM jobqueue.leaders;

-- name: bench_vacuum
-- Between the bulk enqueue and the drain, so the drain starts from fresh statistics.
VACUUM ANALYZE jobqueue.jobs;
