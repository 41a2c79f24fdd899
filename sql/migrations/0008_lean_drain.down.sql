ALTER TABLE jobqueue.jobs DROP COLUMN duration_ms;
COMMENT ON COLUMN jobqueue.jobs.locked_by IS NULL;
CREATE INDEX jobs_list_idx ON jobqueue.jobs (seq);
ALTER TABLE jobqueue.jobs ALTER COLUMN id SET DEFAULT gen_random_uuid();
CREATE OR REPLACE FUNCTION jobqueue.make_job_input(ord integer, job_type text, payload jsonb, priority text, run_at timestamp with time zone, delay interval, queue text, max_attempts integer, idempotency_key text, producer_id text, traceparent text, timeout interval DEFAULT NULL::interval, expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, expire_after interval DEFAULT NULL::interval, idempotency_window interval DEFAULT NULL::interval, idempotency_mismatch text DEFAULT NULL::text) RETURNS jobqueue.job_input
    LANGUAGE plpgsql
    AS $$
DECLARE
    job jobqueue.job_input;
    prefix text := CASE WHEN ord IS NULL THEN '' ELSE format('jobs[%s].', ord - 1) END;
    longest constant interval := interval '3650 days';
BEGIN
    IF job_type IS NULL OR btrim(job_type) = '' THEN
        PERFORM jobqueue.invalid(prefix || 'job_type', 'must be a non-empty string');
    END IF;
    IF queue IS NULL OR btrim(queue) = '' THEN
        PERFORM jobqueue.invalid(prefix || 'queue', 'must be a non-empty string');
    END IF;
    IF max_attempts IS NOT NULL AND max_attempts < 1 THEN
        PERFORM jobqueue.invalid(prefix || 'max_attempts', format('must be at least 1 (got %s)', max_attempts));
    END IF;
    IF delay IS NOT NULL AND delay < interval '0' THEN
        PERFORM jobqueue.invalid(prefix || 'delay', format('must not be negative (got %s)', delay));
    END IF;
    IF delay IS NOT NULL AND run_at IS NOT NULL THEN
        PERFORM jobqueue.invalid(prefix || 'run_at', 'give run_at or delay, not both');
    END IF;
    IF idempotency_key IS NOT NULL AND idempotency_key = '' THEN
        PERFORM jobqueue.invalid(prefix || 'idempotency_key', 'must not be empty when given');
    END IF;
    IF timeout <= interval '0' OR timeout > longest THEN
        PERFORM jobqueue.invalid(prefix || 'timeout', format('must be more than 0 and at most %s (got %s)', longest, timeout));
    END IF;
    IF expire_after <= interval '0' OR expire_after > longest THEN
        PERFORM jobqueue.invalid(prefix || 'expire_after', format('must be more than 0 and at most %s (got %s)', longest, expire_after));
    END IF;
    IF expire_after IS NOT NULL AND expires_at IS NOT NULL THEN
        PERFORM jobqueue.invalid(prefix || 'expire_after', 'give expires_at or expire_after, not both');
    END IF;
    IF idempotency_window <= interval '0' OR idempotency_window > longest THEN
        PERFORM jobqueue.invalid(prefix || 'idempotency_window',
                                 format('must be more than 0 and at most %s (got %s)', longest, idempotency_window));
    END IF;
    IF idempotency_mismatch IS NOT NULL AND idempotency_mismatch NOT IN ('return', 'reject') THEN
        PERFORM jobqueue.invalid(prefix || 'idempotency_mismatch', format('must be return or reject (got %L)', idempotency_mismatch));
    END IF;
    BEGIN
        job.priority := jobqueue.priority_level(coalesce(priority, 'normal'));
    EXCEPTION WHEN invalid_parameter_value THEN
        PERFORM jobqueue.invalid(prefix || 'priority', format('must be one of critical, high, normal, low (got %L)', priority));
    END;
    job.ord := coalesce(ord, 1);
    job.id := gen_random_uuid();
    job.queue := queue;
    job.job_type := job_type;
    job.payload := coalesce(payload, '{}'::jsonb);
    job.run_at := coalesce(run_at, now() + delay, now());
    job.max_attempts := coalesce(
        max_attempts,
        (SELECT d.max_attempts FROM jobqueue.task_defaults d WHERE d.job_type = make_job_input.job_type),
        4);
    job.idempotency_key := idempotency_key;
    job.producer_id := producer_id;
    job.traceparent := traceparent;
    job.timeout := timeout;
    job.expires_at := coalesce(expires_at, job.run_at + expire_after);
    IF expires_at <= job.run_at THEN
        PERFORM jobqueue.invalid(prefix || 'expires_at', format('must be after run_at (%s; got %s)', job.run_at, expires_at));
    END IF;
    job.idempotency_window := idempotency_window;
    job.idempotency_mismatch := coalesce(idempotency_mismatch, 'return');
    RETURN job;
END $$;

DROP FUNCTION jobqueue.uuid_v7();
