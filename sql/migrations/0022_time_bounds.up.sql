-- 0022_time_bounds: a job's times stay within ten years (3650 days, the bound every interval of
-- an enqueue already had). A run_at of 'infinity' or after year 9999 was accepted, and then every
-- listing that met the row failed: Python's datetime ends at year 9999, so psycopg cannot read it.
-- The same rule as jobqueue.client.validation.NewJob.build (Python and REST).
CREATE OR REPLACE FUNCTION jobqueue.job_problem(job_type text, priority text, run_at timestamp with time zone, delay interval,
                                     queue text, max_attempts integer, idempotency_key text, timeout interval,
                                     expires_at timestamp with time zone, expire_after interval,
                                     idempotency_window interval, idempotency_mismatch text,
                                     producer_id text) RETURNS text[]
LANGUAGE sql STABLE AS $$
    -- expires_at is compared with the run_at the job will have: one in the past means now.
    SELECT CASE
        WHEN jobqueue.name_problem(job_type, 255) IS NOT NULL
            THEN ARRAY['job_type', jobqueue.name_problem(job_type, 255)]
        WHEN jobqueue.name_problem(queue, 255) IS NOT NULL THEN ARRAY['queue', jobqueue.name_problem(queue, 255)]
        WHEN max_attempts < 1 THEN ARRAY['max_attempts', format('must be at least 1 (got %s)', max_attempts)]
        WHEN delay < interval '0' THEN ARRAY['delay', format('must not be negative (got %s)', delay)]
        WHEN delay > interval '3650 days'
            THEN ARRAY['delay', format('must be at most %s (got %s)', interval '3650 days', delay)]
        WHEN delay IS NOT NULL AND run_at IS NOT NULL THEN ARRAY['run_at', 'give run_at or delay, not both']
        WHEN run_at > now() + interval '3650 days'
            THEN ARRAY['run_at', format('must be at most %s from now (got %s)', interval '3650 days', run_at)]
        WHEN idempotency_key = '' THEN ARRAY['idempotency_key', 'must not be empty when given']
        WHEN length(idempotency_key) > 255
            THEN ARRAY['idempotency_key', format('must be at most 255 characters (got %s)', length(idempotency_key))]
        WHEN length(producer_id) > 200
            THEN ARRAY['producer_id', format('must be at most 200 characters (got %s)', length(producer_id))]
        WHEN timeout <= interval '0' OR timeout > interval '3650 days'
            THEN ARRAY['timeout', format('must be more than 0 and at most %s (got %s)', interval '3650 days', timeout)]
        WHEN expire_after <= interval '0' OR expire_after > interval '3650 days'
            THEN ARRAY['expire_after', format('must be more than 0 and at most %s (got %s)', interval '3650 days',
                                              expire_after)]
        WHEN expire_after IS NOT NULL AND expires_at IS NOT NULL
            THEN ARRAY['expire_after', 'give expires_at or expire_after, not both']
        WHEN idempotency_window <= interval '0' OR idempotency_window > interval '3650 days'
            THEN ARRAY['idempotency_window', format('must be more than 0 and at most %s (got %s)',
                                                    interval '3650 days', idempotency_window)]
        WHEN idempotency_mismatch NOT IN ('return', 'reject')
            THEN ARRAY['idempotency_mismatch', format('must be return or reject (got %L)', idempotency_mismatch)]
        WHEN lower(priority) NOT IN ('critical', 'high', 'normal', 'low')
            THEN ARRAY['priority', format('must be one of critical, high, normal, low (got %L)', priority)]
        WHEN expires_at <= coalesce(jobqueue.due_at(run_at), now() + delay, now())
            THEN ARRAY['expires_at', format('must be after run_at (%s; got %s)',
                                            coalesce(jobqueue.due_at(run_at), now() + delay, now()), expires_at)]
        WHEN expires_at > coalesce(jobqueue.due_at(run_at), now() + delay, now()) + interval '3650 days'
            THEN ARRAY['expires_at', format('must be at most %s after run_at (%s; got %s)', interval '3650 days',
                                            coalesce(jobqueue.due_at(run_at), now() + delay, now()), expires_at)]
    END
$$;
