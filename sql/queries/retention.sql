-- Retention: deleting finished jobs (with their results, attempt errors and idempotency keys)
-- once they are older than their queue's retention (jobqueue.queue_retention, else the defaults
-- passed in), and idempotency keys whose window has closed.

-- name: retention_prune_jobs
-- One bounded batch of one finished state. Queues are found with a skip scan of
-- jobs_finished_idx (state, queue, finished_at) — one index probe per queue — and each queue's
-- old rows are a range of that index, oldest first, so neither live jobs nor recent finished ones
-- are read. Rows someone holds (an admin retry) are skipped, and the state is checked again as
-- the row is deleted: a live job is never touched. job_results/job_errors have no foreign keys,
-- so their rows go in the same statement, and so does the idempotency key a job still holds (a
-- key never outlives its job: a retention shorter than the key's window frees the key with the
-- job). Every delete probes a primary key (= ANY(ARRAY(...)), or the pruned jobs' (producer, key)
-- for the keys), whatever the statistics say: a join would let the planner hash all finished rows.
WITH RECURSIVE queues AS (
    SELECT min(queue) AS queue FROM jobqueue.jobs
    WHERE state = %(state)s AND state IN ('completed', 'cancelled', 'dead_letter')
    UNION ALL
    SELECT (SELECT min(j.queue) FROM jobqueue.jobs j
            WHERE j.state = %(state)s AND j.state IN ('completed', 'cancelled', 'dead_letter') AND j.queue > q.queue)
    FROM queues q
    WHERE q.queue IS NOT NULL
), victims AS (
    SELECT v.id
    FROM queues q
    LEFT JOIN jobqueue.queue_retention r ON r.queue = q.queue
    CROSS JOIN LATERAL (
        SELECT j.id FROM jobqueue.jobs j
        WHERE j.state = %(state)s AND j.state IN ('completed', 'cancelled', 'dead_letter')
          AND j.queue = q.queue
          AND j.finished_at < coalesce(%(now)s::timestamptz, now()) - coalesce(
                CASE %(state)s WHEN 'completed' THEN r.completed
                               WHEN 'cancelled' THEN r.cancelled
                               WHEN 'dead_letter' THEN r.dead_letter END,
                make_interval(secs => %(keep_seconds)s))
        ORDER BY j.finished_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) v
    WHERE q.queue IS NOT NULL
    LIMIT %(limit)s
), gone AS (
    DELETE FROM jobqueue.jobs j
    WHERE j.id = ANY(ARRAY(SELECT id FROM victims)) AND j.state = %(state)s
    RETURNING j.id, j.producer_id, j.idempotency_key
), results AS (
    DELETE FROM jobqueue.job_results WHERE job_id = ANY(ARRAY(SELECT id FROM gone))
), errors AS (
    DELETE FROM jobqueue.job_errors WHERE job_id = ANY(ARRAY(SELECT id FROM gone))
), keys AS (
    DELETE FROM jobqueue.idempotency_keys k
    WHERE k.ctid = ANY(ARRAY(
        SELECT h.ctid FROM gone g
        CROSS JOIN LATERAL (
            SELECT x.ctid FROM jobqueue.idempotency_keys x
            WHERE x.producer = coalesce(g.producer_id, '') AND x.key = g.idempotency_key AND x.job_id = g.id
            LIMIT 1) AS h
        WHERE g.idempotency_key IS NOT NULL))
)
SELECT count(*) FROM gone;

-- name: retention_prune_idempotency_keys
-- One bounded batch of idempotency keys whose window has closed, oldest first (through
-- idempotency_keys_expiry_idx). Rows an enqueue holds are skipped: it is replacing them anyway.
WITH victims AS (
    SELECT k.producer, k.key FROM jobqueue.idempotency_keys k
    WHERE k.expires_at <= coalesce(%(now)s::timestamptz, now())
    ORDER BY k.expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM jobqueue.idempotency_keys k
    USING victims v
    WHERE k.producer = v.producer AND k.key = v.key
    RETURNING 1
)
SELECT count(*) FROM gone;
