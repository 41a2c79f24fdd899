-- A leaner drain: fewer index entries and rows written per job (issue 10).
--
-- 1. Job ids are time-ordered (UUIDv7: 48 bits of Unix milliseconds, then random bits), so new
--    ids land at the right edge of jobs_pkey instead of all over it, and the primary key orders
--    jobs by creation: the listing (newest first) walks it backwards, and jobs_list_idx (on seq),
--    which every insert, claim and ack added an entry to, is gone. Ids given before this revision
--    are random (v4): such jobs list among themselves in no particular order until retention
--    removes them.
-- 2. A result row is written only where there is a result to keep (a handler that returned
--    something, a dead letter's final error); a completion's duration goes on the job's row
--    (duration_ms, written by the same update that completes it), and locked_by keeps the worker
--    that finished the job.
CREATE FUNCTION jobqueue.uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    -- RFC 9562 UUIDv7 with sub-millisecond precision (method 3): 48 bits of Unix milliseconds,
    -- the version (7) and 12 bits of the millisecond's fraction, then the variant and 62 random
    -- bits (those of a v4 UUID, whose variant bits are already right).
    SELECT encode(substring(int8send(t.ms) FROM 3)
                  || int2send((28672 + floor((t.exact - t.ms) * 4096))::smallint)
                  || substring(uuid_send(gen_random_uuid()) FROM 9), 'hex')::uuid
    FROM (SELECT floor(e)::bigint AS ms, e AS exact
          FROM (SELECT extract(epoch FROM clock_timestamp()) * 1000 AS e) AS now_ms) AS t
$$;
COMMENT ON FUNCTION jobqueue.uuid_v7() IS 'A time-ordered UUID (version 7): Unix time to a fraction of a millisecond, then random bits.';

ALTER TABLE jobqueue.jobs ALTER COLUMN id SET DEFAULT jobqueue.uuid_v7();
DROP INDEX jobqueue.jobs_list_idx;

ALTER TABLE jobqueue.jobs ADD COLUMN duration_ms double precision;
COMMENT ON COLUMN jobqueue.jobs.duration_ms IS 'How long the handler of the attempt that completed the job ran, in milliseconds.';
COMMENT ON COLUMN jobqueue.jobs.locked_by IS 'The worker holding the job (processing), or the one that finished it.';

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
    job.id := jobqueue.uuid_v7();
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
