-- Enqueue guarantees: idempotency keys held for a window after submission whatever the job's
-- state; a deadline per attempt and an expiry for waiting jobs, both set at enqueue.
--
-- * jobqueue.idempotency_keys: one row per (producer, key) while its window is open. Before, a key
--   was unique only among live jobs (jobs_idempotency_idx), so a REST client retrying a
--   503-on-commit after its first submission had in fact committed and completed got a second
--   job (a second payment). Now a repeat within the window returns the original job in any state.
--   The window runs from the submission (or from run_at, for a job scheduled later: a key never
--   frees before its job was due), default 24 h, per queue queue_settings.idempotency_window,
--   per call idempotency_window. insert_jobs takes keys with INSERT … ON CONFLICT DO NOTHING (a
--   producer racing on the same key waits for the holder's transaction: it sees the committed
--   holder, or takes the key if the holder rolled back); only when some key was not taken does it
--   read the holders in a fresh statement, and delete those whose window closed and try again. A
--   batch without keys never touches this table.
--   Each key keeps a fingerprint of what it was first submitted with (job_type, queue, payload):
--   a repeat that differs returns the original job, or with idempotency_mismatch => 'reject'
--   fails with SQLSTATE 23505 (unique_violation, CONSTRAINT idempotency_keys_pkey, COLUMN
--   idempotency_key). The pruner deletes expired rows, and a key row goes with its job when the
--   job is pruned or purged.
-- * jobs.timeout: the deadline of each attempt of this job (NULL: the task's timeout, else the
--   worker's processing TTL). jobs.expires_at: a job still waiting (pending, or failed waiting for
--   its retry) at that time is dead-lettered as expired by the sweeper; from expires_at or
--   expire_after (counted from run_at) at enqueue, else from queue_settings.job_ttl.
-- * enqueue(), enqueue_many() and make_job_input() take the new fields; enqueue_many names the
--   field (jobs[i].run_at …) of a value that is not of its type instead of a bare cast error.

ALTER TABLE jobqueue.jobs
    ADD COLUMN timeout interval,
    ADD COLUMN expires_at timestamptz,
    ADD CONSTRAINT jobs_timeout_positive CHECK (timeout > interval '0');
COMMENT ON COLUMN jobqueue.jobs.timeout IS 'Deadline of each attempt of this job (NULL: the task''s timeout, else the worker''s processing TTL).';
COMMENT ON COLUMN jobqueue.jobs.expires_at IS 'A job still waiting (pending, or failed waiting for its retry) at this time is dead-lettered as expired. NULL: never.';

-- The sweeper's expiry scan: only waiting jobs that have an expiry.
CREATE INDEX jobs_expiry_idx ON jobqueue.jobs (expires_at)
    WHERE expires_at IS NOT NULL AND state IN ('pending', 'failed');

ALTER TABLE jobqueue.queue_settings
    ADD COLUMN job_ttl interval,
    ADD COLUMN idempotency_window interval,
    ADD CONSTRAINT queue_settings_job_ttl_range CHECK (job_ttl > interval '0' AND job_ttl <= interval '3650 days'),
    ADD CONSTRAINT queue_settings_idempotency_window_range CHECK (
        idempotency_window > interval '0' AND idempotency_window <= interval '3650 days');
COMMENT ON COLUMN jobqueue.queue_settings.job_ttl IS 'Expiry of this queue''s jobs counted from their run_at, when the enqueue gives none (NULL: they never expire).';
COMMENT ON COLUMN jobqueue.queue_settings.idempotency_window IS 'How long an idempotency key of this queue stays held after submission (NULL: 24 hours).';

CREATE TABLE jobqueue.idempotency_keys (
    producer     text        NOT NULL,
    key          text        NOT NULL,
    job_id       uuid        NOT NULL,
    fingerprint  bigint,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (producer, key)
) WITH (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05
);
COMMENT ON TABLE jobqueue.idempotency_keys IS 'Idempotency keys held for their window: (producer id, '''' without one; key) -> the job first submitted with it. A repeat within the window returns that job, whatever its state.';
COMMENT ON COLUMN jobqueue.idempotency_keys.fingerprint IS 'jobqueue.job_fingerprint() of the job''s job_type, queue and payload: a repeat with idempotency_mismatch => ''reject'' must match it.';
-- The pruner deletes expired keys oldest first.
CREATE INDEX idempotency_keys_expiry_idx ON jobqueue.idempotency_keys (expires_at);

-- What a key remembers of its job: a 64-bit hash of job_type, queue and payload (jsonb's own hash,
-- so equal documents hash alike whatever their key order or spacing). A hash, not md5 of the text:
-- an md5 of jsonb_build_array(...)::text cost ~15 µs of server CPU per keyed enqueue, this ~1 µs.
-- A collision only makes a differing repeat count as the same job — the default answer anyway.
CREATE FUNCTION jobqueue.job_fingerprint(job_type text, queue text, payload jsonb) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT hashtextextended(job_type, hashtextextended(queue, jsonb_hash_extended(payload, 0)))
$$;

-- Keys of jobs submitted before this revision: the job that held the key under 0005 (a live one),
-- else the newest, each with a window from its submission (or run_at). A live job keeps its key
-- at least one window from now, as it would have while live.
INSERT INTO jobqueue.idempotency_keys (producer, key, job_id, fingerprint, created_at, expires_at)
SELECT producer, key, job_id, fingerprint, created_at, expires_at
FROM (
    SELECT DISTINCT ON (coalesce(j.producer_id, ''), j.idempotency_key)
           coalesce(j.producer_id, '') AS producer, j.idempotency_key AS key, j.id AS job_id,
           jobqueue.job_fingerprint(j.job_type, j.queue, j.payload) AS fingerprint, j.created_at,
           greatest(j.created_at, j.run_at,
                    CASE WHEN j.state IN ('pending', 'processing', 'failed') THEN now() END) + interval '24 hours'
               AS expires_at
    FROM jobqueue.jobs j
    WHERE j.idempotency_key IS NOT NULL
    ORDER BY coalesce(j.producer_id, ''), j.idempotency_key,
             j.state IN ('pending', 'processing', 'failed') DESC, j.created_at DESC, j.seq DESC
) AS held
WHERE expires_at > now();

DROP INDEX jobqueue.jobs_idempotency_idx;

-- ---------------------------------------------------------------------------------------------
-- Enqueue
-- ---------------------------------------------------------------------------------------------
ALTER TYPE jobqueue.job_input
    ADD ATTRIBUTE timeout interval,
    ADD ATTRIBUTE expires_at timestamptz,
    ADD ATTRIBUTE idempotency_window interval,
    ADD ATTRIBUTE idempotency_mismatch text;

DROP FUNCTION jobqueue.enqueue(text, text, text, timestamptz, text, integer, text, interval, text, text);
DROP FUNCTION jobqueue.enqueue(text, jsonb, text, timestamptz, text, integer, text, interval, text, text);
DROP FUNCTION jobqueue.make_job_input(integer, text, jsonb, text, timestamptz, interval, text, integer, text, text, text);

-- A repeat refused by idempotency_mismatch => 'reject': unique_violation on the key, naming the
-- job that holds it (also alone in DETAIL, for programs).
CREATE FUNCTION jobqueue.idempotency_mismatch(key text, holder uuid, job text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'unique_violation', CONSTRAINT = 'idempotency_keys_pkey',
        COLUMN = 'idempotency_key', DETAIL = holder::text,
        MESSAGE = format('jobqueue: idempotency_key: %L%s is held by job %s, submitted with another job_type, '
                         'queue or payload (idempotency_mismatch => reject)',
                         key, coalesce(' of ' || job, ''), holder);
END $$;

-- As in 0001, plus the new fields. Intervals must be more than 0 and at most 3650 days (an
-- attempt's deadline, an expiry or a window past that is a mistake, and would overflow timestamps).
CREATE FUNCTION jobqueue.make_job_input(
    ord integer, job_type text, payload jsonb, priority text, run_at timestamptz, delay interval,
    queue text, max_attempts integer, idempotency_key text, producer_id text, traceparent text,
    timeout interval DEFAULT NULL, expires_at timestamptz DEFAULT NULL, expire_after interval DEFAULT NULL,
    idempotency_window interval DEFAULT NULL, idempotency_mismatch text DEFAULT NULL
) RETURNS jobqueue.job_input
LANGUAGE plpgsql AS $$
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

-- Inserts validated jobs; returns, in input order, each job's id and whether it was created
-- (false: its idempotency key was held, and the holder's id is returned). Jobs without a key
-- cost one INSERT; keyed ones first take their keys in jobqueue.idempotency_keys:
--   1. INSERT the keys ON CONFLICT DO NOTHING, in (producer, key) order so that two batches
--      sharing keys cannot deadlock. A key another transaction is inserting (or deleting) makes
--      this wait for it: committed, it is a conflict; rolled back, the key is taken here. When
--      every key was taken (the usual case) that is all;
--   2. else read the holders of the others in a fresh statement, which sees a holder committed
--      while step 1 waited: a holder whose window is open answers for the job (created false);
--   3. holders whose window has closed are deleted (and so are free), and with those whose row
--      is gone (pruned meanwhile) their jobs go round again.
-- A repeat whose job_type, queue or payload differ from what the key was first submitted with
-- returns the original job, or fails with 23505 when it asked for idempotency_mismatch 'reject'.
-- Jobs whose queue has a job_ttl and that give no expiry expire job_ttl after their run_at.
-- keyed: how many of the jobs have a key, when the caller counted them on its way (enqueue_many);
-- NULL: counted here (for one job without a query).
DROP FUNCTION jobqueue.insert_jobs(jobqueue.job_input[]);
CREATE FUNCTION jobqueue.insert_jobs(jobs jobqueue.job_input[], keyed integer DEFAULT NULL)
RETURNS TABLE (ord integer, id uuid, created boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    todo jobqueue.job_input[] := jobs;
    inserted integer;
    held jsonb := '{}';  -- ord of a job -> id of the job holding its key
    refused integer;
    rounds integer := 0;
BEGIN
    IF keyed IS NOT NULL THEN
        NULL;
    ELSIF cardinality(jobs) = 1 THEN  -- a plain expression, not a query: one enqueue() pays nothing for it
        keyed := CASE WHEN (jobs[1]).idempotency_key IS NULL THEN 0 ELSE 1 END;
    ELSE
        SELECT count(*) INTO keyed FROM unnest(jobs) AS i WHERE i.idempotency_key IS NOT NULL;
    END IF;
    WHILE keyed > 0 LOOP
        rounds := rounds + 1;
        INSERT INTO jobqueue.idempotency_keys AS k (producer, key, job_id, fingerprint, expires_at)
        SELECT coalesce(i.producer_id, ''), i.idempotency_key, i.id,
               jobqueue.job_fingerprint(i.job_type, i.queue, i.payload),
               greatest(now(), i.run_at) + coalesce(i.idempotency_window, s.idempotency_window, interval '24 hours')
        FROM unnest(todo) AS i
        LEFT JOIN jobqueue.queue_settings s ON s.queue = i.queue
        WHERE i.idempotency_key IS NOT NULL
        ORDER BY coalesce(i.producer_id, ''), i.idempotency_key, i.ord
        ON CONFLICT (producer, key) DO NOTHING;
        GET DIAGNOSTICS inserted = ROW_COUNT;
        EXIT WHEN inserted = keyed;

        SELECT held || coalesce(jsonb_object_agg(i.ord, h.job_id) FILTER (
                   WHERE h.job_id <> i.id AND h.expires_at > now()), '{}'),
               coalesce(array_agg(i ORDER BY i.ord) FILTER (
                   WHERE h.job_id IS NULL OR (h.job_id <> i.id AND h.expires_at <= now())), '{}'),
               min(i.ord) FILTER (
                   WHERE h.job_id <> i.id AND h.expires_at > now() AND i.idempotency_mismatch = 'reject'
                     AND h.fingerprint IS DISTINCT FROM jobqueue.job_fingerprint(i.job_type, i.queue, i.payload))
          INTO held, todo, refused
          FROM unnest(todo) AS i
          LEFT JOIN jobqueue.idempotency_keys h
            ON h.producer = coalesce(i.producer_id, '') AND h.key = i.idempotency_key
         WHERE i.idempotency_key IS NOT NULL;
        IF refused IS NOT NULL THEN
            PERFORM jobqueue.idempotency_mismatch(
                (SELECT i.idempotency_key FROM unnest(jobs) AS i WHERE i.ord = refused),
                (held->>refused::text)::uuid,
                CASE WHEN cardinality(jobs) > 1 THEN format('jobs[%s]', refused - 1) END);
        END IF;
        keyed := cardinality(todo);
        EXIT WHEN keyed = 0;
        IF rounds >= 5 THEN
            RAISE EXCEPTION USING ERRCODE = '40001',
                MESSAGE = 'jobqueue: idempotency keys kept changing hands during this enqueue; retry it';
        END IF;
        DELETE FROM jobqueue.idempotency_keys AS k
        USING unnest(todo) AS i
        WHERE k.producer = coalesce(i.producer_id, '') AND k.key = i.idempotency_key AND k.expires_at <= now();
    END LOOP;

    INSERT INTO jobqueue.jobs AS j (id, queue, job_type, payload, priority, run_at, max_attempts,
                                    idempotency_key, producer_id, traceparent, timeout, expires_at)
    SELECT i.id, i.queue, i.job_type, i.payload, i.priority, i.run_at, i.max_attempts,
           i.idempotency_key, i.producer_id, i.traceparent, i.timeout,
           coalesce(i.expires_at, i.run_at + s.job_ttl)
    FROM unnest(jobs) AS i
    LEFT JOIN jobqueue.queue_settings s ON s.queue = i.queue
    WHERE i.idempotency_key IS NULL OR NOT held ? i.ord::text
    ORDER BY i.ord;

    IF held = '{}' THEN
        RETURN QUERY SELECT i.ord, i.id, true FROM unnest(jobs) AS i ORDER BY i.ord;
    ELSE
        RETURN QUERY
            SELECT i.ord, coalesce((held->>i.ord::text)::uuid, i.id), NOT held ? i.ord::text
            FROM unnest(jobs) AS i
            ORDER BY i.ord;
    END IF;
END $$;

CREATE FUNCTION jobqueue.enqueue(
    job_type              text,
    payload               jsonb       DEFAULT '{}'::jsonb,
    priority              text        DEFAULT 'normal',
    run_at                timestamptz DEFAULT NULL,
    queue                 text        DEFAULT 'default',
    max_attempts          integer     DEFAULT NULL,
    idempotency_key       text        DEFAULT NULL,
    delay                 interval    DEFAULT NULL,
    producer_id           text        DEFAULT NULL,
    traceparent           text        DEFAULT NULL,
    timeout               interval    DEFAULT NULL,
    expires_at            timestamptz DEFAULT NULL,
    expire_after          interval    DEFAULT NULL,
    idempotency_window    interval    DEFAULT NULL,
    idempotency_mismatch  text        DEFAULT NULL
) RETURNS uuid
LANGUAGE sql AS $$
    SELECT r.id FROM jobqueue.insert_jobs(ARRAY[jobqueue.make_job_input(
        NULL, job_type, payload, priority, run_at, delay, queue, max_attempts,
        idempotency_key, producer_id, traceparent, timeout, expires_at, expire_after,
        idempotency_window, idempotency_mismatch)]) AS r
$$;
COMMENT ON FUNCTION jobqueue.enqueue(text, jsonb, text, timestamptz, text, integer, text, interval, text, text, interval, timestamptz, interval, interval, text) IS 'Enqueue one job inside the caller''s transaction; returns its id (or, within the idempotency window, the id of the job first submitted with the same key).';

-- The same, for a payload given as text (an untyped literal picks this one): refuses text that is
-- not JSON with an error naming the payload field instead of a bare cast error.
CREATE FUNCTION jobqueue.enqueue(
    job_type              text,
    payload               text,
    priority              text        DEFAULT 'normal',
    run_at                timestamptz DEFAULT NULL,
    queue                 text        DEFAULT 'default',
    max_attempts          integer     DEFAULT NULL,
    idempotency_key       text        DEFAULT NULL,
    delay                 interval    DEFAULT NULL,
    producer_id           text        DEFAULT NULL,
    traceparent           text        DEFAULT NULL,
    timeout               interval    DEFAULT NULL,
    expires_at            timestamptz DEFAULT NULL,
    expire_after          interval    DEFAULT NULL,
    idempotency_window    interval    DEFAULT NULL,
    idempotency_mismatch  text        DEFAULT NULL
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
                            idempotency_key, delay, producer_id, traceparent, timeout, expires_at,
                            expire_after, idempotency_window, idempotency_mismatch);
END $$;

-- enqueue_many's typed fields, element by element: raises 22023 naming the first value that is
-- not of its field's type (jobs[2].timeout). Only called once a cast has failed.
CREATE FUNCTION jobqueue.name_bad_job_field(jobs jsonb) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    element record;
    field record;
BEGIN
    FOR element IN SELECT e.job, e.ord FROM jsonb_array_elements(jobs) WITH ORDINALITY AS e(job, ord) LOOP
        FOR field IN SELECT f.name, f.kind FROM (VALUES
                ('run_at', 'timestamptz'), ('delay', 'interval'), ('max_attempts', 'integer'),
                ('timeout', 'interval'), ('expires_at', 'timestamptz'), ('expire_after', 'interval'),
                ('idempotency_window', 'interval')) AS f(name, kind)
            WHERE element.job->>f.name IS NOT NULL LOOP
            BEGIN
                CASE field.kind
                    WHEN 'timestamptz' THEN PERFORM (element.job->>field.name)::timestamptz;
                    WHEN 'interval' THEN PERFORM (element.job->>field.name)::interval;
                    ELSE PERFORM (element.job->>field.name)::integer;
                END CASE;
            EXCEPTION WHEN data_exception THEN
                PERFORM jobqueue.invalid(format('jobs[%s].%s', element.ord - 1, field.name),
                                         format('must be %s (got %L)', CASE field.kind
                                             WHEN 'timestamptz' THEN 'a timestamp with a time zone'
                                             WHEN 'interval' THEN 'an interval'
                                             ELSE 'an integer' END, element.job->>field.name));
            END;
        END LOOP;
    END LOOP;
END $$;

-- Bulk enqueue from a JSON array of objects with the same fields as enqueue(); one statement.
CREATE OR REPLACE FUNCTION jobqueue.enqueue_many(jobs jsonb)
RETURNS TABLE (id uuid, created boolean)
LANGUAGE plpgsql AS $$
DECLARE
    inputs jobqueue.job_input[];
    keyed integer;
BEGIN
    IF jobs IS NULL OR jsonb_typeof(jobs) <> 'array' THEN
        PERFORM jobqueue.invalid('jobs', 'must be a JSON array of job objects');
    END IF;
    BEGIN
        SELECT count(*) FILTER (WHERE e.job->>'idempotency_key' IS NOT NULL),
               coalesce(array_agg(jobqueue.make_job_input(
                   e.ord::integer, e.job->>'job_type', e.job->'payload', e.job->>'priority',
                   (e.job->>'run_at')::timestamptz, (e.job->>'delay')::interval,
                   coalesce(e.job->>'queue', 'default'), (e.job->>'max_attempts')::integer,
                   e.job->>'idempotency_key', e.job->>'producer_id', e.job->>'traceparent',
                   (e.job->>'timeout')::interval, (e.job->>'expires_at')::timestamptz,
                   (e.job->>'expire_after')::interval, (e.job->>'idempotency_window')::interval,
                   e.job->>'idempotency_mismatch')
               ORDER BY e.ord), '{}')
          INTO keyed, inputs
          FROM jsonb_array_elements(jobs) WITH ORDINALITY AS e(job, ord);
    EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow
                   OR invalid_text_representation OR numeric_value_out_of_range THEN
        PERFORM jobqueue.name_bad_job_field(jobs);
        RAISE;
    END;
    RETURN QUERY SELECT r.id, r.created FROM jobqueue.insert_jobs(inputs, keyed) AS r ORDER BY r.ord;
END $$;
