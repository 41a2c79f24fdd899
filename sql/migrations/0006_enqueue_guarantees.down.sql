-- Enqueue guarantees: undo 0006_enqueue_guarantees.up.sql. Keys are unique again only among live
-- jobs (0005's jobs_idempotency_idx: fails while two live jobs of one producer share a key, which
-- the window allows once the first window closed); per-job timeouts and expiries are dropped.
DROP FUNCTION jobqueue.enqueue(text, text, text, timestamptz, text, integer, text, interval, text, text, interval, timestamptz, interval, interval, text);
DROP FUNCTION jobqueue.enqueue(text, jsonb, text, timestamptz, text, integer, text, interval, text, text, interval, timestamptz, interval, interval, text);
DROP FUNCTION jobqueue.make_job_input(integer, text, jsonb, text, timestamptz, interval, text, integer, text, text, text, interval, timestamptz, interval, interval, text);
DROP FUNCTION jobqueue.name_bad_job_field(jsonb);
DROP FUNCTION jobqueue.idempotency_mismatch(text, uuid, text);

ALTER TYPE jobqueue.job_input
    DROP ATTRIBUTE timeout,
    DROP ATTRIBUTE expires_at,
    DROP ATTRIBUTE idempotency_window,
    DROP ATTRIBUTE idempotency_mismatch;

-- As in 0001.
CREATE FUNCTION jobqueue.make_job_input(
    ord integer, job_type text, payload jsonb, priority text, run_at timestamptz, delay interval,
    queue text, max_attempts integer, idempotency_key text, producer_id text, traceparent text
) RETURNS jobqueue.job_input
LANGUAGE plpgsql AS $$
DECLARE
    job jobqueue.job_input;
    prefix text := CASE WHEN ord IS NULL THEN '' ELSE format('jobs[%s].', ord - 1) END;
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
    RETURN job;
END $$;

-- As in 0005.
DROP FUNCTION jobqueue.insert_jobs(jobqueue.job_input[], integer);
CREATE FUNCTION jobqueue.insert_jobs(jobs jobqueue.job_input[])
RETURNS TABLE (ord integer, id uuid, created boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    todo jobqueue.job_input[] := jobs;
    inserted uuid[] := '{}';
    rounds integer := 0;
BEGIN
    LOOP
        rounds := rounds + 1;
        WITH ins AS (
            INSERT INTO jobqueue.jobs AS j (id, queue, job_type, payload, priority, run_at, max_attempts,
                                            idempotency_key, producer_id, traceparent)
            SELECT i.id, i.queue, i.job_type, i.payload, i.priority, i.run_at, i.max_attempts,
                   i.idempotency_key, i.producer_id, i.traceparent
            FROM unnest(todo) AS i
            ORDER BY i.ord
            ON CONFLICT ((coalesce(producer_id, '')), idempotency_key)
                WHERE idempotency_key IS NOT NULL AND state IN ('pending', 'processing', 'failed')
                DO NOTHING
            RETURNING j.id
        )
        SELECT inserted || coalesce(array_agg(ins.id), '{}') INTO inserted FROM ins;

        IF cardinality(inserted) = cardinality(jobs) THEN
            RETURN QUERY SELECT i.ord, i.id, true FROM unnest(jobs) AS i ORDER BY i.ord;
            RETURN;
        END IF;

        -- Keys already held: a fresh statement sees the live holder even when another producer
        -- committed it after this call began (same producer, same key). A holder that finished
        -- meanwhile frees its key, so those rows go round again.
        SELECT coalesce(array_agg(i ORDER BY i.ord), '{}') INTO todo
        FROM unnest(jobs) AS i
        WHERE NOT (i.id = ANY(inserted))
          AND NOT EXISTS (
              SELECT 1 FROM jobqueue.jobs j
              WHERE j.idempotency_key = i.idempotency_key
                AND coalesce(j.producer_id, '') = coalesce(i.producer_id, '')
                AND j.state IN ('pending', 'processing', 'failed'));
        IF cardinality(todo) = 0 OR rounds >= 5 THEN
            RETURN QUERY
                SELECT i.ord,
                       CASE WHEN i.id = ANY(inserted) THEN i.id ELSE holder.id END,
                       i.id = ANY(inserted)
                FROM unnest(jobs) AS i
                LEFT JOIN LATERAL (
                    SELECT j.id FROM jobqueue.jobs j
                    WHERE j.idempotency_key = i.idempotency_key
                      AND coalesce(j.producer_id, '') = coalesce(i.producer_id, '')
                      AND j.state IN ('pending', 'processing', 'failed')
                    ORDER BY j.seq
                    LIMIT 1
                ) holder ON NOT (i.id = ANY(inserted))
                ORDER BY i.ord;
            RETURN;
        END IF;
    END LOOP;
END $$;

-- As in 0001.
CREATE FUNCTION jobqueue.enqueue(
    job_type         text,
    payload          jsonb       DEFAULT '{}'::jsonb,
    priority         text        DEFAULT 'normal',
    run_at           timestamptz DEFAULT NULL,
    queue            text        DEFAULT 'default',
    max_attempts     integer     DEFAULT NULL,
    idempotency_key  text        DEFAULT NULL,
    delay            interval    DEFAULT NULL,
    producer_id      text        DEFAULT NULL,
    traceparent      text        DEFAULT NULL
) RETURNS uuid
LANGUAGE sql AS $$
    SELECT r.id FROM jobqueue.insert_jobs(ARRAY[jobqueue.make_job_input(
        NULL, job_type, payload, priority, run_at, delay, queue, max_attempts,
        idempotency_key, producer_id, traceparent)]) AS r
$$;
COMMENT ON FUNCTION jobqueue.enqueue(text, jsonb, text, timestamptz, text, integer, text, interval, text, text) IS 'Enqueue one job inside the caller''s transaction; returns its id (or the id of the live job holding the same idempotency key).';

-- The same, for a payload given as text (an untyped literal picks this one): refuses text that is
-- not JSON with an error naming the payload field instead of a bare cast error.
CREATE FUNCTION jobqueue.enqueue(
    job_type         text,
    payload          text,
    priority         text        DEFAULT 'normal',
    run_at           timestamptz DEFAULT NULL,
    queue            text        DEFAULT 'default',
    max_attempts     integer     DEFAULT NULL,
    idempotency_key  text        DEFAULT NULL,
    delay            interval    DEFAULT NULL,
    producer_id      text        DEFAULT NULL,
    traceparent      text        DEFAULT NULL
) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    document jsonb;
BEGIN
    BEGIN
        document := payload::jsonb;
    EXCEPTION WHEN invalid_text_representation THEN
        PERFORM jobqueue.invalid('payload', 'must be valid JSON');
    END;
    RETURN jobqueue.enqueue(job_type, document, priority, run_at, queue, max_attempts,
                            idempotency_key, delay, producer_id, traceparent);
END $$;

-- Bulk enqueue from a JSON array of objects with the same fields as enqueue(); one statement.
CREATE OR REPLACE FUNCTION jobqueue.enqueue_many(jobs jsonb)
RETURNS TABLE (id uuid, created boolean)
LANGUAGE plpgsql AS $$
DECLARE
    inputs jobqueue.job_input[];
BEGIN
    IF jobs IS NULL OR jsonb_typeof(jobs) <> 'array' THEN
        PERFORM jobqueue.invalid('jobs', 'must be a JSON array of job objects');
    END IF;
    SELECT coalesce(array_agg(jobqueue.make_job_input(
               e.ord::integer, e.job->>'job_type', e.job->'payload', e.job->>'priority',
               (e.job->>'run_at')::timestamptz, (e.job->>'delay')::interval,
               coalesce(e.job->>'queue', 'default'), (e.job->>'max_attempts')::integer,
               e.job->>'idempotency_key', e.job->>'producer_id', e.job->>'traceparent')
           ORDER BY e.ord), '{}')
      INTO inputs
      FROM jsonb_array_elements(jobs) WITH ORDINALITY AS e(job, ord);
    RETURN QUERY SELECT r.id, r.created FROM jobqueue.insert_jobs(inputs) AS r ORDER BY r.ord;
END $$;

DROP TABLE jobqueue.idempotency_keys;
DROP FUNCTION jobqueue.job_fingerprint(text, text, jsonb);
CREATE UNIQUE INDEX jobs_idempotency_idx ON jobqueue.jobs ((coalesce(producer_id, '')), idempotency_key)
    WHERE idempotency_key IS NOT NULL AND state IN ('pending', 'processing', 'failed');

ALTER TABLE jobqueue.queue_settings DROP COLUMN job_ttl, DROP COLUMN idempotency_window;
DROP INDEX jobqueue.jobs_expiry_idx;
ALTER TABLE jobqueue.jobs DROP COLUMN timeout, DROP COLUMN expires_at;
