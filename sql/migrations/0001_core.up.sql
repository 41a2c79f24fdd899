-- jobqueue core schema: jobs, results, attempt errors, worker registry, leader leases, task defaults.
--
-- Bloat and speed choices (see README "Storage design"):
-- * jobqueue.jobs keeps every job; workers only ever touch it through small partial indexes over
--   the live states, so finished rows cost nothing to a claim and are pruned in batches later.
-- * Results and attempt errors live in insert-only tables without foreign keys (an FK would add a
--   lookup and a row lock on jobs to every completion).
-- * Aggressive per-table autovacuum: the hot table churns two row versions per job.

CREATE SCHEMA IF NOT EXISTS jobqueue;

CREATE TABLE jobqueue.jobs (
    id               uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    seq              bigint      GENERATED ALWAYS AS IDENTITY,
    run_at           timestamptz NOT NULL DEFAULT now(),
    locked_until     timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    attempts         integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL DEFAULT 4,
    priority         smallint    NOT NULL DEFAULT 2,
    cancel_requested boolean     NOT NULL DEFAULT false,
    state            text        NOT NULL DEFAULT 'pending',
    queue            text        NOT NULL DEFAULT 'default',
    job_type         text        NOT NULL,
    payload          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    idempotency_key  text,
    producer_id      text,
    traceparent      text,
    locked_by        text,
    CONSTRAINT jobs_priority_range CHECK (priority BETWEEN 0 AND 3),
    CONSTRAINT jobs_state_known CHECK (state IN ('pending', 'processing', 'completed', 'failed', 'dead_letter', 'cancelled')),
    CONSTRAINT jobs_attempts_positive CHECK (max_attempts >= 1 AND attempts >= 0),
    CONSTRAINT jobs_job_type_present CHECK (length(job_type) > 0),
    CONSTRAINT jobs_queue_present CHECK (length(queue) > 0)
) WITH (
    fillfactor = 85,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

COMMENT ON TABLE jobqueue.jobs IS 'Every job in every state. pending includes scheduled (run_at in the future); failed = waiting for its retry at run_at.';

-- The claim: runnable jobs of a queue in priority, then submission order. Matches the claim's ORDER BY.
CREATE INDEX jobs_claim_idx ON jobqueue.jobs (queue, priority, run_at, seq)
    WHERE state IN ('pending', 'failed');
-- The sweeper: held jobs by lease expiry. Keyed on locked_until IS NOT NULL (true exactly while a
-- job is processing) rather than on state: with a state predicate, stale statistics ("almost no
-- processing rows") made the planner drive the batched ack through this index instead of the
-- primary key, turning a 2 ms ack into a 900 ms nested loop.
CREATE INDEX jobs_lease_idx ON jobqueue.jobs (locked_until)
    WHERE locked_until IS NOT NULL;
-- Idempotency: a key is unique among live jobs only; a finished job frees it.
CREATE UNIQUE INDEX jobs_idempotency_idx ON jobqueue.jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL AND state IN ('pending', 'processing', 'failed');
-- Dead letters: admin listing, counts and bulk retry by queue/type.
CREATE INDEX jobs_dead_letter_idx ON jobqueue.jobs (queue, job_type, finished_at)
    WHERE state = 'dead_letter';

CREATE TABLE jobqueue.job_results (
    job_id       uuid        PRIMARY KEY,
    finished_at  timestamptz NOT NULL DEFAULT now(),
    duration_ms  double precision,
    outcome      text        NOT NULL,
    worker_id    text,
    result       jsonb,
    error        jsonb,
    CONSTRAINT job_results_outcome_known CHECK (outcome IN ('completed', 'dead_letter'))
) WITH (autovacuum_vacuum_insert_scale_factor = 0.05);
COMMENT ON TABLE jobqueue.job_results IS 'Result (completed) or final error (dead_letter) of a job; written put-if-absent by job id.';

CREATE TABLE jobqueue.job_errors (
    job_id      uuid        NOT NULL,
    attempt     integer     NOT NULL,
    failed_at   timestamptz NOT NULL DEFAULT now(),
    error_type  text        NOT NULL,
    message     text        NOT NULL,
    traceback   text,
    worker_id   text,
    PRIMARY KEY (job_id, attempt)
);
COMMENT ON TABLE jobqueue.job_errors IS 'The error of every failed attempt, kept when the job is dead-lettered.';

CREATE TABLE jobqueue.workers (
    id              text        PRIMARY KEY,
    host            text        NOT NULL,
    pid             integer     NOT NULL,
    queues          text[]      NOT NULL,
    concurrency     integer     NOT NULL,
    status          text        NOT NULL DEFAULT 'running',
    jobs_processed  bigint      NOT NULL DEFAULT 0,
    jobs_failed     bigint      NOT NULL DEFAULT 0,
    started_at      timestamptz NOT NULL DEFAULT now(),
    last_heartbeat  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT workers_status_known CHECK (status IN ('running', 'stopping', 'stopped', 'lost'))
);
COMMENT ON TABLE jobqueue.workers IS 'Worker registry: one row per worker process, heartbeated.';

CREATE TABLE jobqueue.leaders (
    name        text        PRIMARY KEY,
    leader_id   text        NOT NULL,
    elected_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
COMMENT ON TABLE jobqueue.leaders IS 'Leader leases (a row with an expiry, not an advisory lock, so it works behind PgBouncer).';

CREATE TABLE jobqueue.task_defaults (
    job_type      text        PRIMARY KEY,
    max_attempts  integer     NOT NULL CHECK (max_attempts >= 1),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE jobqueue.task_defaults IS 'Per job type defaults declared by @queue.task, synced at worker start, applied by every enqueue path.';

-- ---------------------------------------------------------------------------------------------
-- Enqueue: one code path for SQL, Python and REST. Validation raises SQLSTATE 22023 with the
-- offending field in the error's COLUMN, so every caller can name it.
-- ---------------------------------------------------------------------------------------------

CREATE TYPE jobqueue.job_input AS (
    ord              integer,
    id               uuid,
    queue            text,
    job_type         text,
    payload          jsonb,
    priority         smallint,
    run_at           timestamptz,
    max_attempts     integer,
    idempotency_key  text,
    producer_id      text,
    traceparent      text
);

CREATE FUNCTION jobqueue.invalid(field text, message text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = '22023', COLUMN = field, MESSAGE = format('jobqueue: %s: %s', field, message);
END $$;

CREATE FUNCTION jobqueue.priority_level(priority text) RETURNS smallint
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    level smallint := CASE lower(priority)
        WHEN 'critical' THEN 0 WHEN 'high' THEN 1 WHEN 'normal' THEN 2 WHEN 'low' THEN 3 END;
BEGIN
    IF level IS NULL THEN
        PERFORM jobqueue.invalid('priority', format('must be one of critical, high, normal, low (got %L)', priority));
    END IF;
    RETURN level;
END $$;

CREATE FUNCTION jobqueue.priority_name(level smallint) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT (ARRAY['critical', 'high', 'normal', 'low'])[level + 1]
$$;

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

-- Inserts validated jobs; returns, in input order, each job's id and whether it was created
-- (false: a live job already held its idempotency key, and that job's id is returned).
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
            ON CONFLICT (idempotency_key)
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
        -- committed it after this call began. A holder that finished meanwhile frees its key,
        -- so those rows go round again.
        SELECT coalesce(array_agg(i ORDER BY i.ord), '{}') INTO todo
        FROM unnest(jobs) AS i
        WHERE NOT (i.id = ANY(inserted))
          AND NOT EXISTS (
              SELECT 1 FROM jobqueue.jobs j
              WHERE j.idempotency_key = i.idempotency_key
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
                      AND j.state IN ('pending', 'processing', 'failed')
                    ORDER BY j.seq
                    LIMIT 1
                ) holder ON NOT (i.id = ANY(inserted))
                ORDER BY i.ord;
            RETURN;
        END IF;
    END LOOP;
END $$;

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
CREATE FUNCTION jobqueue.enqueue_many(jobs jsonb)
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

-- One NOTIFY per statement and queue (not per row) wakes idle workers of that queue.
CREATE FUNCTION jobqueue.notify_new_jobs() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('jobqueue_jobs', q.queue) FROM (SELECT DISTINCT n.queue FROM new_jobs n) AS q;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_notify_insert AFTER INSERT ON jobqueue.jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobqueue.notify_new_jobs();

-- ---------------------------------------------------------------------------------------------
-- Cancel, from SQL or any client: pending/failed -> cancelled; processing -> cancel requested.
-- Returns what happened: cancelled | cancel_requested | completed | dead_letter | cancelled_already | not_found.
-- ---------------------------------------------------------------------------------------------
CREATE FUNCTION jobqueue.cancel(job_id uuid) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    current_state text;
BEGIN
    SELECT state INTO current_state FROM jobqueue.jobs WHERE id = job_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'not_found';
    ELSIF current_state IN ('pending', 'failed') THEN
        UPDATE jobqueue.jobs SET state = 'cancelled', finished_at = now(), updated_at = now()
         WHERE id = job_id;
        RETURN 'cancelled';
    ELSIF current_state = 'processing' THEN
        UPDATE jobqueue.jobs SET cancel_requested = true, updated_at = now() WHERE id = job_id;
        PERFORM pg_notify('jobqueue_cancel', job_id::text);
        RETURN 'cancel_requested';
    ELSIF current_state = 'cancelled' THEN
        RETURN 'cancelled_already';
    ELSE
        RETURN current_state;
    END IF;
END $$;

-- ---------------------------------------------------------------------------------------------
-- Views for operators in psql.
-- ---------------------------------------------------------------------------------------------
CREATE VIEW jobqueue.queue_stats AS
SELECT queue,
       jobqueue.priority_name(priority) AS priority,
       count(*) FILTER (WHERE state = 'pending' AND run_at <= now())    AS pending,
       count(*) FILTER (WHERE state = 'pending' AND run_at > now())     AS scheduled,
       count(*) FILTER (WHERE state = 'processing')                      AS processing,
       count(*) FILTER (WHERE state = 'failed')                          AS failed,
       count(*) FILTER (WHERE state = 'dead_letter')                     AS dead,
       coalesce(extract(epoch FROM now() - min(run_at) FILTER (
           WHERE state IN ('pending', 'failed') AND run_at <= now())), 0)::double precision AS oldest_runnable_age_seconds
FROM jobqueue.jobs
WHERE state IN ('pending', 'processing', 'failed', 'dead_letter')
GROUP BY queue, priority
ORDER BY queue, priority;
COMMENT ON VIEW jobqueue.queue_stats IS 'Per queue and priority: runnable, scheduled, processing, waiting-for-retry and dead counts, and the oldest runnable job''s age.';

CREATE VIEW jobqueue.dead_letters AS
SELECT j.id, j.queue, j.job_type, jobqueue.priority_name(j.priority) AS priority, j.attempts,
       j.max_attempts, j.finished_at AS died_at, j.created_at, j.producer_id, j.payload,
       e.error_type AS last_error_type, e.message AS last_error, e.traceback AS last_traceback
FROM jobqueue.jobs j
LEFT JOIN LATERAL (
    SELECT error_type, message, traceback FROM jobqueue.job_errors
    WHERE job_id = j.id ORDER BY attempt DESC LIMIT 1
) e ON true
WHERE j.state = 'dead_letter';
COMMENT ON VIEW jobqueue.dead_letters IS 'Dead-lettered jobs with their last error.';
