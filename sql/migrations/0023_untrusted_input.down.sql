-- 0023_untrusted_input undone: job_problem() without the traceparent (as 0022 left it), its
-- callers as before, and no API secrets.
DROP TABLE jobqueue.api_secrets;

CREATE OR REPLACE FUNCTION jobqueue.job_problem(job_type text, priority text, run_at timestamp with time zone, delay interval, queue text, max_attempts integer, idempotency_key text, timeout interval, expires_at timestamp with time zone, expire_after interval, idempotency_window interval, idempotency_mismatch text, producer_id text) RETURNS text[]
    LANGUAGE sql STABLE
    AS $$
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

COMMENT ON FUNCTION jobqueue.job_problem(text, text, timestamp with time zone, interval, text, integer, text, interval, timestamp with time zone, interval, interval, text, text) IS 'The first problem of a job''s enqueue fields as {field, message}, or NULL: every enqueue path''s validation, one expression the planner inlines (so enqueue_many checks all its jobs in one query).';

CREATE OR REPLACE FUNCTION jobqueue.make_job_input(ord integer, job_type text, payload jsonb, priority text, run_at timestamp with time zone, delay interval, queue text, max_attempts integer, idempotency_key text, producer_id text, traceparent text, timeout interval DEFAULT NULL::interval, expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, expire_after interval DEFAULT NULL::interval, idempotency_window interval DEFAULT NULL::interval, idempotency_mismatch text DEFAULT NULL::text) RETURNS jobqueue.job_input
    LANGUAGE plpgsql
    AS $$
DECLARE
    problem text[] := jobqueue.job_problem(job_type, priority, run_at, delay, queue, max_attempts, idempotency_key,
                                           timeout, expires_at, expire_after, idempotency_window, idempotency_mismatch,
                                           producer_id);
BEGIN
    IF problem IS NOT NULL THEN
        PERFORM jobqueue.invalid(CASE WHEN ord IS NULL THEN '' ELSE format('jobs[%s].', ord - 1) END || problem[1],
                                 problem[2]);
    END IF;
    RETURN jobqueue.resolve_job(ord, jobqueue.uuid_v7(), job_type, payload, priority, run_at, delay, queue,
                                max_attempts, idempotency_key, producer_id, traceparent, timeout, expires_at,
                                expire_after, idempotency_window, idempotency_mismatch,
                                (SELECT d.max_attempts FROM jobqueue.task_defaults d
                                 WHERE d.job_type = make_job_input.job_type));
END $$;

CREATE OR REPLACE FUNCTION jobqueue.enqueue_unchecked(job_type text, payload jsonb DEFAULT '{}'::jsonb, priority text DEFAULT 'normal'::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, queue text DEFAULT 'default'::text, max_attempts integer DEFAULT NULL::integer, idempotency_key text DEFAULT NULL::text, delay interval DEFAULT NULL::interval, producer_id text DEFAULT NULL::text, traceparent text DEFAULT NULL::text, timeout interval DEFAULT NULL::interval, expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, expire_after interval DEFAULT NULL::interval, idempotency_window interval DEFAULT NULL::interval, idempotency_mismatch text DEFAULT NULL::text) RETURNS uuid
    LANGUAGE plpgsql
    AS $$
DECLARE
    problem text[] := jobqueue.job_problem(job_type, priority, run_at, delay, queue, max_attempts, idempotency_key,
                                           timeout, expires_at, expire_after, idempotency_window, idempotency_mismatch,
                                           producer_id);
    job_id uuid;
    wanted boolean;
BEGIN
    IF problem IS NOT NULL THEN
        PERFORM jobqueue.invalid(problem[1], problem[2]);
    END IF;
    IF idempotency_key IS NOT NULL THEN
        RETURN (SELECT r.id FROM jobqueue.insert_jobs(ARRAY[jobqueue.make_job_input(
            NULL, job_type, payload, priority, jobqueue.due_at(run_at), delay, queue, max_attempts, idempotency_key,
            producer_id, traceparent, timeout, expires_at, expire_after, idempotency_window,
            idempotency_mismatch)]) AS r);
    END IF;
    -- Without a key, the common case: one statement resolves the defaults, inserts the job and
    -- reads what job_events_wanted() would say (each statement a plpgsql function runs costs).
    WITH added AS (
        INSERT INTO jobqueue.jobs AS j (id, queue, job_type, payload, priority, run_at, max_attempts, producer_id,
                                        traceparent, timeout, expires_at)
        SELECT (i.job).id, (i.job).queue, (i.job).job_type, (i.job).payload, (i.job).priority, (i.job).run_at,
               (i.job).max_attempts, (i.job).producer_id, (i.job).traceparent, (i.job).timeout,
               coalesce((i.job).expires_at, (i.job).run_at + s.job_ttl)
        FROM (SELECT jobqueue.resolve_job(NULL, jobqueue.uuid_v7(), enqueue_unchecked.job_type, enqueue_unchecked.payload,
                                          enqueue_unchecked.priority, jobqueue.due_at(enqueue_unchecked.run_at), enqueue_unchecked.delay,
                                          enqueue_unchecked.queue, enqueue_unchecked.max_attempts, NULL, enqueue_unchecked.producer_id,
                                          enqueue_unchecked.traceparent, enqueue_unchecked.timeout, enqueue_unchecked.expires_at,
                                          enqueue_unchecked.expire_after, NULL, NULL, d.max_attempts) AS job
              FROM (SELECT) AS one
              LEFT JOIN jobqueue.task_defaults d ON d.job_type = enqueue_unchecked.job_type) AS i
        LEFT JOIN jobqueue.queue_settings s ON s.queue = enqueue_unchecked.queue
        RETURNING j.id
    )
    SELECT a.id, EXISTS (SELECT FROM jobqueue.event_listeners l WHERE l.expires_at > now())
      INTO job_id, wanted
      FROM added AS a;
    PERFORM pg_notify('jobqueue_jobs', queue);
    IF wanted THEN
        PERFORM jobqueue.emit_job_events(ARRAY['job.queued'], ARRAY[queue], ARRAY[producer_id], ARRAY[job_id]);
    END IF;
    RETURN job_id;
END $$;

CREATE OR REPLACE FUNCTION jobqueue.enqueue_many_unchecked(jobs jsonb) RETURNS TABLE(id uuid, created boolean)
    LANGUAGE plpgsql
    AS $$
DECLARE
    inputs jobqueue.job_input[];
    keyed integer;
    bad integer;       -- ord of the first job with a problem
    problem text[];
BEGIN
    IF jobs IS NULL OR jsonb_typeof(jobs) <> 'array' THEN
        PERFORM jobqueue.invalid('jobs', 'must be a JSON array of job objects');
    END IF;
    -- Every job validated and resolved in one query (the OFFSET 0 fences keep each field read
    -- once per job, and the ids made in the jobs' order whatever join the planner picks); nothing
    -- is written unless all of them are valid. (Fields it does not know are ignored: finding them,
    -- jsonb - text[] per job, cost 6 % of a bulk enqueue's CPU; Python and REST refuse them.)
    BEGIN
        SELECT min(v.ord) FILTER (WHERE v.problem IS NOT NULL),
               (array_agg(v.problem ORDER BY v.ord) FILTER (WHERE v.problem IS NOT NULL))[1:1],
               count(*) FILTER (WHERE v.idempotency_key IS NOT NULL),
               coalesce(array_agg(jobqueue.resolve_job(
                   v.ord, v.id, v.job_type, v.payload, v.priority, jobqueue.due_at(v.run_at), v.delay, v.queue,
                   v.max_attempts, v.idempotency_key, v.producer_id, v.traceparent, v.timeout, v.expires_at,
                   v.expire_after, v.idempotency_window, v.idempotency_mismatch, d.max_attempts) ORDER BY v.ord), '{}')
          INTO bad, problem, keyed, inputs
          FROM (SELECT f.*, coalesce(
                           jobqueue.job_problem(f.job_type, f.priority, f.run_at, f.delay, f.queue,
                                                f.max_attempts, f.idempotency_key, f.timeout, f.expires_at,
                                                f.expire_after, f.idempotency_window, f.idempotency_mismatch,
                                                f.producer_id),
                           jobqueue.zoneless_problem('run_at', f.run_at_text),
                           jobqueue.zoneless_problem('expires_at', f.expires_at_text)) AS problem
                FROM (SELECT e.ord::integer AS ord, jobqueue.uuid_v7(e.ord) AS id,
                             e.job->>'job_type' AS job_type, e.job->'payload' AS payload,
                             e.job->>'priority' AS priority, e.job->>'run_at' AS run_at_text,
                             (e.job->>'run_at')::timestamptz AS run_at,
                             (e.job->>'delay')::interval AS delay, coalesce(e.job->>'queue', 'default') AS queue,
                             (e.job->>'max_attempts')::integer AS max_attempts,
                             e.job->>'idempotency_key' AS idempotency_key, e.job->>'producer_id' AS producer_id,
                             e.job->>'traceparent' AS traceparent, (e.job->>'timeout')::interval AS timeout,
                             e.job->>'expires_at' AS expires_at_text,
                             (e.job->>'expires_at')::timestamptz AS expires_at,
                             (e.job->>'expire_after')::interval AS expire_after,
                             (e.job->>'idempotency_window')::interval AS idempotency_window,
                             e.job->>'idempotency_mismatch' AS idempotency_mismatch
                      FROM jsonb_array_elements(jobs) WITH ORDINALITY AS e(job, ord)
                      OFFSET 0) AS f
                OFFSET 0) AS v
          LEFT JOIN jobqueue.task_defaults d ON d.job_type = v.job_type;
    EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow
                   OR invalid_text_representation OR numeric_value_out_of_range THEN
        PERFORM jobqueue.name_bad_job_field(jobs);
        RAISE;
    END;
    IF bad IS NOT NULL THEN
        IF jsonb_typeof(jobs->(bad - 1)) <> 'object' THEN
            PERFORM jobqueue.invalid(format('jobs[%s]', bad - 1),
                                     format('must be a JSON object (got %s)', jsonb_typeof(jobs->(bad - 1))));
        END IF;
        PERFORM jobqueue.invalid(format('jobs[%s].%s', bad - 1, problem[1][1]), problem[1][2]);
    END IF;
    RETURN QUERY SELECT r.id, r.created FROM jobqueue.insert_jobs(inputs, keyed) AS r ORDER BY r.ord;
END $$;

DROP FUNCTION jobqueue.job_problem(text, text, timestamp with time zone, interval, text, integer, text, interval,
                                   timestamp with time zone, interval, interval, text, text, text);
