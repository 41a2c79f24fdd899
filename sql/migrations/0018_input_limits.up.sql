-- Input limits (issue 11): what every enqueue path refuses, with the same field and message in
-- SQL, Python and REST, and writing nothing.
--
-- 1. Names: job_type and queue are 1 to 255 characters, not blank (blank: nothing but spaces,
--    tabs, line breaks, \f or \v — the set Python's check strips too); idempotency_key is at most
--    255 characters and producer_id at most 200 (as an API key's producer). Before, a long name was
--    refused, if at all, by PostgreSQL itself ("index row requires 12832 bytes", "payload string
--    too long" from pg_notify) or stored and slowed every index that holds it. 255 characters are
--    at most 1,020 bytes in UTF-8: two names fit a btree entry (2,704 bytes) with room to spare.
-- 2. run_at in the past means now: enqueue() and enqueue_many() store max(run_at, now()), so a
--    job given a run_at in 1970 neither jumps ahead of the jobs already waiting (FIFO within a
--    level) nor makes the queue look 56 years late (queue.age_seconds, the StuckJobs alert), and an
--    expiry counted from it (expire_after, the queue's job_ttl) is counted from now. The scheduler's
--    ticks (fire_schedule) keep their fire time.
-- 3. enqueue_many reads run_at and expires_at from JSON text, where a time without an offset
--    would silently be read in the session's TimeZone: such a value is refused
--    (jobs[i].run_at: must have a UTC offset). A typed timestamptz argument of enqueue() is already
--    a point in time when the function sees it (PostgreSQL applied the session's TimeZone to a
--    zone-less literal): pass an offset, or set TimeZone.
-- 4. enqueue_many names the element that is not a JSON object (jobs[2]: must be a JSON object),
--    where it said jobs[2].job_type: must be a non-empty string.
-- 5. A schedule's job_type and queue follow the same rule when it is defined (schedules_before_write),
--    so that no schedule is accepted whose every fire would be refused.
-- Validation stays one inlined expression per job (no plpgsql call per job, no trigger): the
-- functions below are those of 0009 with the new checks and the clamp added to their expressions.
-- The helpers are STABLE, not IMMUTABLE, because format() is: the planner inlines an IMMUTABLE SQL
-- function only if everything in it is immutable, and a call per job costs as much as all the rest.

CREATE FUNCTION jobqueue.name_problem(name text, longest integer) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN name IS NULL OR btrim(name, E' \t\n\r\f\v') = '' THEN 'must be a non-empty string'
        WHEN length(name) > longest THEN format('must be at most %s characters (got %s)', longest, length(name))
    END
$$;
COMMENT ON FUNCTION jobqueue.name_problem(text, integer) IS 'Why a job type or queue name is refused (NULL: it is fine): blank, or longer than longest characters.';

CREATE FUNCTION jobqueue.due_at(run_at timestamp with time zone) RETURNS timestamp with time zone
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN run_at < now() THEN now() ELSE run_at END
$$;
COMMENT ON FUNCTION jobqueue.due_at(timestamp with time zone) IS 'A producer''s run_at as enqueue stores it: one in the past means now (NULL stays NULL: no run_at given).';

CREATE FUNCTION jobqueue.zoneless_problem(field text, value text) RETURNS text[]
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    -- A time of day, then Z or an offset (+02, +0200, +02:00, seconds allowed as Python writes
    -- them for old local times) at the very end: RFC 3339 / ISO 8601 with an offset.
    SELECT CASE WHEN value !~* '\d:\d\d(:\d\d(\.\d+)?)?\s*(z|[+-]\d\d(:?\d\d(:?\d\d(\.\d+)?)?)?)$'
        THEN ARRAY[field, format('must be a timestamp with a UTC offset, e.g. 2030-01-31T09:00:00Z or '
                                 '2030-01-31T10:00:00+01:00 (got %L)', left(value, 64))]
    END
$$;
COMMENT ON FUNCTION jobqueue.zoneless_problem(text, text) IS 'enqueue_many''s check of a JSON timestamp: {field, message} when it has no UTC offset (it would be read in the session''s TimeZone), else NULL.';

CREATE FUNCTION jobqueue.job_problem(job_type text, priority text, run_at timestamp with time zone, delay interval,
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
        WHEN delay IS NOT NULL AND run_at IS NOT NULL THEN ARRAY['run_at', 'give run_at or delay, not both']
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
    END
$$;
COMMENT ON FUNCTION jobqueue.job_problem(text, text, timestamp with time zone, interval, text, integer, text, interval, timestamp with time zone, interval, interval, text, text) IS 'The first problem of a job''s enqueue fields as {field, message}, or NULL: every enqueue path''s validation, one expression the planner inlines (so enqueue_many checks all its jobs in one query).';
DROP FUNCTION jobqueue.job_problem(text, text, timestamp with time zone, interval, text, integer, text, interval,
                                   timestamp with time zone, interval, interval, text);

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

CREATE OR REPLACE FUNCTION jobqueue.enqueue(job_type text, payload jsonb DEFAULT '{}'::jsonb, priority text DEFAULT 'normal'::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, queue text DEFAULT 'default'::text, max_attempts integer DEFAULT NULL::integer, idempotency_key text DEFAULT NULL::text, delay interval DEFAULT NULL::interval, producer_id text DEFAULT NULL::text, traceparent text DEFAULT NULL::text, timeout interval DEFAULT NULL::interval, expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, expire_after interval DEFAULT NULL::interval, idempotency_window interval DEFAULT NULL::interval, idempotency_mismatch text DEFAULT NULL::text) RETURNS uuid
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
        FROM (SELECT jobqueue.resolve_job(NULL, jobqueue.uuid_v7(), enqueue.job_type, enqueue.payload,
                                          enqueue.priority, jobqueue.due_at(enqueue.run_at), enqueue.delay,
                                          enqueue.queue, enqueue.max_attempts, NULL, enqueue.producer_id,
                                          enqueue.traceparent, enqueue.timeout, enqueue.expires_at,
                                          enqueue.expire_after, NULL, NULL, d.max_attempts) AS job
              FROM (SELECT) AS one
              LEFT JOIN jobqueue.task_defaults d ON d.job_type = enqueue.job_type) AS i
        LEFT JOIN jobqueue.queue_settings s ON s.queue = enqueue.queue
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

CREATE OR REPLACE FUNCTION jobqueue.enqueue_many(jobs jsonb) RETURNS TABLE(id uuid, created boolean)
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

-- The schedule trigger of 0002 with the name rule of enqueue (item 5).
CREATE OR REPLACE FUNCTION jobqueue.schedules_before_write() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    problem text;
    redefined boolean := TG_OP = 'INSERT' OR (NEW.cron, NEW.timezone) IS DISTINCT FROM (OLD.cron, OLD.timezone);
BEGIN
    IF NEW.name IS NULL OR btrim(NEW.name) = '' THEN
        PERFORM jobqueue.invalid('name', 'must be a non-empty string');
    END IF;
    IF redefined THEN
        problem := jobqueue.cron_problem(NEW.cron);
        IF problem IS NOT NULL THEN
            PERFORM jobqueue.invalid('cron', problem);
        END IF;
        problem := jobqueue.timezone_problem(NEW.timezone);
        IF problem IS NOT NULL THEN
            PERFORM jobqueue.invalid('timezone', problem);
        END IF;
    END IF;
    problem := jobqueue.name_problem(NEW.job_type, 255);
    IF problem IS NOT NULL THEN
        PERFORM jobqueue.invalid('job_type', problem);
    END IF;
    problem := jobqueue.name_problem(NEW.queue, 255);
    IF problem IS NOT NULL THEN
        PERFORM jobqueue.invalid('queue', problem);
    END IF;
    NEW.priority := jobqueue.priority_name(jobqueue.priority_level(NEW.priority));
    IF NEW.max_attempts < 1 THEN
        PERFORM jobqueue.invalid('max_attempts', format('must be at least 1 (got %s)', NEW.max_attempts));
    END IF;
    IF NEW.misfire_policy IS NULL OR NEW.misfire_policy NOT IN ('fire_once', 'fire_all', 'skip') THEN
        PERFORM jobqueue.invalid('misfire_policy', format('must be one of fire_once, fire_all, skip (got %L)', NEW.misfire_policy));
    END IF;
    IF NEW.misfire_limit IS NULL OR NEW.misfire_limit < 1 THEN
        PERFORM jobqueue.invalid('misfire_limit', format('must be at least 1 (got %s)', NEW.misfire_limit));
    END IF;
    NEW.payload := coalesce(NEW.payload, '{}'::jsonb);

    IF TG_OP = 'UPDATE' THEN
        -- A new definition, or a resume, starts from now: the scheduler recomputes next_fire_at
        -- unless this statement set it itself. Ticks during a pause are not fired.
        IF redefined OR (NEW.enabled AND NOT OLD.enabled) THEN
            NEW.error := NULL;
            IF NEW.next_fire_at IS NOT DISTINCT FROM OLD.next_fire_at THEN
                NEW.next_fire_at := NULL;
            END IF;
        END IF;
        IF (NEW.name, NEW.cron, NEW.timezone, NEW.job_type, NEW.payload, NEW.priority, NEW.queue, NEW.max_attempts,
            NEW.enabled, NEW.misfire_policy, NEW.misfire_limit)
           IS DISTINCT FROM
           (OLD.name, OLD.cron, OLD.timezone, OLD.job_type, OLD.payload, OLD.priority, OLD.queue, OLD.max_attempts,
            OLD.enabled, OLD.misfire_policy, OLD.misfire_limit) THEN
            NEW.updated_at := now();
        END IF;
    END IF;

    -- Wake the scheduler when this row may now fire earlier than it planned.
    IF NEW.enabled AND NEW.error IS NULL AND (
           TG_OP = 'INSERT' OR NOT OLD.enabled OR NEW.next_fire_at IS NULL OR NEW.next_fire_at < OLD.next_fire_at) THEN
        PERFORM pg_notify('jobqueue_schedules', NEW.name);
    END IF;
    RETURN NEW;
END $$;
