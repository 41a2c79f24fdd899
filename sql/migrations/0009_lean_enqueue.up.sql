-- A leaner enqueue (issue 10): the same validation, defaults, idempotency and notifications, for
-- less work per statement and per job.
--
-- 1. uuid_v7() is one expression, which the planner inlines: as a SQL function with a FROM clause
--    it was planned anew at every call (~0.07 ms, as much as the rest of a single-row INSERT), and
--    its random bits come from random() instead of gen_random_uuid() (9 µs a job before, 2.5 now).
--    uuid_v7(n) also puts n (mod 16384) in the 14 bits after the variant, so the ids of one
--    statement's jobs keep their order even when two are made in the same microsecond.
-- 2. No insert triggers on jobqueue.jobs. The enqueue functions announce the jobs they insert
--    themselves (announce_new_jobs): one NOTIFY jobqueue_jobs per queue and, while an event stream
--    is open (job_events_wanted()), job.queued events — what jobs_notify_insert and
--    jobs_events_insert did, without a transition table and two trigger calls per statement.
--    Rows INSERTed into jobqueue.jobs by hand wake nobody (workers find them at their next poll):
--    enqueue through jobqueue.enqueue()/enqueue_many().
-- 3. Validation is one expression (job_problem: the first problem of a job, or NULL) and the
--    defaults another (resolve_job), evaluated set-based: enqueue_many validates and resolves all
--    its jobs in one query (no plpgsql call per job) and inserts them in one statement;
--    enqueue() without an idempotency key is one statement. The messages and the field they name
--    are those of before, and a bad job still writes nothing.
CREATE OR REPLACE FUNCTION jobqueue.uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    -- RFC 9562 UUIDv7 with sub-millisecond precision (method 3): 48 bits of Unix milliseconds
    -- (the first 12 hex digits of milliseconds * 4096), the version (7), 12 bits of the
    -- millisecond's fraction, then the variant and 62 random bits (random(): the backend's PRNG,
    -- seeded from a strong source when it starts; gen_random_uuid() costs 4 µs a call here).
    SELECT (overlay(lpad(to_hex((date_part('epoch', clock_timestamp()) * 4096000)::bigint), 15, '0')
                    PLACING '7' FROM 13 FOR 0)
            || to_hex(32768 + floor(random() * 16384)::integer)
            || lpad(to_hex(floor(random() * 281474976710656)::bigint), 12, '0'))::uuid
$$;

CREATE FUNCTION jobqueue.uuid_v7(n bigint) RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    -- uuid_v7() with n mod 16384 in the 14 bits after the variant (RFC 9562 method 1, a counter in
    -- rand_b), then 48 random bits: ids made in one microsecond still sort by n.
    SELECT (overlay(lpad(to_hex((date_part('epoch', clock_timestamp()) * 4096000)::bigint), 15, '0')
                    PLACING '7' FROM 13 FOR 0)
            || to_hex(32768 + (n % 16384)::integer)
            || lpad(to_hex(floor(random() * 281474976710656)::bigint), 12, '0'))::uuid
$$;
COMMENT ON FUNCTION jobqueue.uuid_v7(bigint) IS 'uuid_v7() for the n-th job of a statement: ids made in the same microsecond sort by n (mod 16384).';

CREATE FUNCTION jobqueue.job_problem(job_type text, priority text, run_at timestamp with time zone, delay interval,
                                     queue text, max_attempts integer, idempotency_key text, timeout interval,
                                     expires_at timestamp with time zone, expire_after interval,
                                     idempotency_window interval, idempotency_mismatch text) RETURNS text[]
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN job_type IS NULL OR btrim(job_type) = '' THEN ARRAY['job_type', 'must be a non-empty string']
        WHEN queue IS NULL OR btrim(queue) = '' THEN ARRAY['queue', 'must be a non-empty string']
        WHEN max_attempts < 1 THEN ARRAY['max_attempts', format('must be at least 1 (got %s)', max_attempts)]
        WHEN delay < interval '0' THEN ARRAY['delay', format('must not be negative (got %s)', delay)]
        WHEN delay IS NOT NULL AND run_at IS NOT NULL THEN ARRAY['run_at', 'give run_at or delay, not both']
        WHEN idempotency_key = '' THEN ARRAY['idempotency_key', 'must not be empty when given']
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
        WHEN expires_at <= coalesce(run_at, now() + delay, now())
            THEN ARRAY['expires_at', format('must be after run_at (%s; got %s)', coalesce(run_at, now() + delay, now()),
                                            expires_at)]
    END
$$;
COMMENT ON FUNCTION jobqueue.job_problem(text, text, timestamp with time zone, interval, text, integer, text, interval, timestamp with time zone, interval, interval, text) IS 'The first problem of a job''s enqueue fields as {field, message}, or NULL: every enqueue path''s validation, one expression the planner inlines (so enqueue_many checks all its jobs in one query).';

CREATE FUNCTION jobqueue.resolve_job(ord integer, id uuid, job_type text, payload jsonb, priority text,
                                     run_at timestamp with time zone, delay interval, queue text, max_attempts integer,
                                     idempotency_key text, producer_id text, traceparent text, timeout interval,
                                     expires_at timestamp with time zone, expire_after interval,
                                     idempotency_window interval, idempotency_mismatch text,
                                     default_max_attempts integer) RETURNS jobqueue.job_input
LANGUAGE sql STABLE AS $$
    -- default_max_attempts: the job type's jobqueue.task_defaults row, looked up by the caller
    -- (a sub-select here would keep the planner from inlining this).
    SELECT ROW(coalesce(ord, 1), id, queue, job_type, coalesce(payload, '{}'::jsonb),
               CASE lower(coalesce(priority, 'normal'))
                   WHEN 'critical' THEN 0 WHEN 'high' THEN 1 WHEN 'normal' THEN 2 WHEN 'low' THEN 3 END,
               coalesce(run_at, now() + delay, now()), coalesce(max_attempts, default_max_attempts, 4),
               idempotency_key, producer_id, traceparent, timeout,
               coalesce(expires_at, coalesce(run_at, now() + delay, now()) + expire_after),
               idempotency_window, coalesce(idempotency_mismatch, 'return'))::jobqueue.job_input
$$;
COMMENT ON FUNCTION jobqueue.resolve_job(integer, uuid, text, jsonb, text, timestamp with time zone, interval, text, integer, text, text, text, interval, timestamp with time zone, interval, interval, text, integer) IS 'A valid job''s enqueue fields with their defaults applied (priority level, run_at, max_attempts, expiry); the queue''s job_ttl is applied by the insert.';

CREATE FUNCTION jobqueue.announce_new_jobs(queues text[], producers text[], ids uuid[]) RETURNS integer
LANGUAGE plpgsql AS $$
BEGIN
    IF cardinality(queues) = 1 THEN
        PERFORM pg_notify('jobqueue_jobs', queues[1]);
    ELSE
        PERFORM pg_notify('jobqueue_jobs', q.queue) FROM (SELECT DISTINCT unnest(queues) AS queue) AS q;
    END IF;
    IF cardinality(ids) > 0 AND jobqueue.job_events_wanted() THEN
        PERFORM jobqueue.emit_job_events(array_fill('job.queued'::text, ARRAY[cardinality(ids)]), queues, producers,
                                         ids);
    END IF;
    RETURN cardinality(ids);
END $$;
COMMENT ON FUNCTION jobqueue.announce_new_jobs(text[], text[], uuid[]) IS 'Called by every enqueue path with the jobs it inserted (returns how many): NOTIFY jobqueue_jobs once per queue (sent at commit; PostgreSQL folds repeats within a transaction), and job.queued events while an event stream is open.';

-- job_events_wanted() as plpgsql: as a SQL function with a sub-select it could not be inlined and
-- was parsed and planned anew in every transaction that called it (each announcement, and each
-- update statement's event trigger); plpgsql keeps its plan for the session.
CREATE OR REPLACE FUNCTION jobqueue.job_events_wanted() RETURNS boolean
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN EXISTS (SELECT FROM jobqueue.event_listeners WHERE expires_at > now());
END $$;

DROP TRIGGER jobs_events_insert ON jobqueue.jobs;
DROP TRIGGER jobs_notify_insert ON jobqueue.jobs;
DROP FUNCTION jobqueue.job_events_on_insert();
DROP FUNCTION jobqueue.notify_new_jobs();

CREATE OR REPLACE FUNCTION jobqueue.make_job_input(ord integer, job_type text, payload jsonb, priority text, run_at timestamp with time zone, delay interval, queue text, max_attempts integer, idempotency_key text, producer_id text, traceparent text, timeout interval DEFAULT NULL::interval, expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, expire_after interval DEFAULT NULL::interval, idempotency_window interval DEFAULT NULL::interval, idempotency_mismatch text DEFAULT NULL::text) RETURNS jobqueue.job_input
    LANGUAGE plpgsql
    AS $$
DECLARE
    problem text[] := jobqueue.job_problem(job_type, priority, run_at, delay, queue, max_attempts, idempotency_key,
                                           timeout, expires_at, expire_after, idempotency_window, idempotency_mismatch);
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

CREATE OR REPLACE FUNCTION jobqueue.insert_jobs(jobs jobqueue.job_input[], keyed integer DEFAULT NULL::integer) RETURNS TABLE(ord integer, id uuid, created boolean)
    LANGUAGE plpgsql
    AS $$
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

    WITH added AS (
        INSERT INTO jobqueue.jobs AS j (id, queue, job_type, payload, priority, run_at, max_attempts,
                                        idempotency_key, producer_id, traceparent, timeout, expires_at)
        SELECT i.id, i.queue, i.job_type, i.payload, i.priority, i.run_at, i.max_attempts,
               i.idempotency_key, i.producer_id, i.traceparent, i.timeout,
               coalesce(i.expires_at, i.run_at + s.job_ttl)
        FROM unnest(jobs) AS i
        LEFT JOIN jobqueue.queue_settings s ON s.queue = i.queue
        WHERE i.idempotency_key IS NULL OR NOT held ? i.ord::text
        ORDER BY i.ord
        RETURNING j.id, j.queue, j.producer_id, j.seq
    )
    SELECT jobqueue.announce_new_jobs(array_agg(n.queue ORDER BY n.seq), array_agg(n.producer_id ORDER BY n.seq),
                                      array_agg(n.id ORDER BY n.seq))
    INTO inserted
    FROM added AS n
    HAVING count(*) > 0;

    IF held = '{}' THEN
        RETURN QUERY SELECT i.ord, i.id, true FROM unnest(jobs) AS i ORDER BY i.ord;
    ELSE
        RETURN QUERY
            SELECT i.ord, coalesce((held->>i.ord::text)::uuid, i.id), NOT held ? i.ord::text
            FROM unnest(jobs) AS i
            ORDER BY i.ord;
    END IF;
END $$;

CREATE OR REPLACE FUNCTION jobqueue.enqueue(job_type text, payload jsonb DEFAULT '{}'::jsonb, priority text DEFAULT 'normal'::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, queue text DEFAULT 'default'::text, max_attempts integer DEFAULT NULL::integer, idempotency_key text DEFAULT NULL::text, delay interval DEFAULT NULL::interval, producer_id text DEFAULT NULL::text, traceparent text DEFAULT NULL::text, timeout interval DEFAULT NULL::interval, expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, expire_after interval DEFAULT NULL::interval, idempotency_window interval DEFAULT NULL::interval, idempotency_mismatch text DEFAULT NULL::text) RETURNS uuid
    LANGUAGE plpgsql
    AS $$
DECLARE
    problem text[] := jobqueue.job_problem(job_type, priority, run_at, delay, queue, max_attempts, idempotency_key,
                                           timeout, expires_at, expire_after, idempotency_window, idempotency_mismatch);
    job_id uuid;
    wanted boolean;
BEGIN
    IF problem IS NOT NULL THEN
        PERFORM jobqueue.invalid(problem[1], problem[2]);
    END IF;
    IF idempotency_key IS NOT NULL THEN
        RETURN (SELECT r.id FROM jobqueue.insert_jobs(ARRAY[jobqueue.make_job_input(
            NULL, job_type, payload, priority, run_at, delay, queue, max_attempts, idempotency_key, producer_id,
            traceparent, timeout, expires_at, expire_after, idempotency_window, idempotency_mismatch)]) AS r);
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
                                          enqueue.priority, enqueue.run_at, enqueue.delay, enqueue.queue,
                                          enqueue.max_attempts, NULL, enqueue.producer_id, enqueue.traceparent,
                                          enqueue.timeout, enqueue.expires_at, enqueue.expire_after, NULL, NULL,
                                          d.max_attempts) AS job
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
    -- is written unless all of them are valid.
    BEGIN
        SELECT min(v.ord) FILTER (WHERE v.problem IS NOT NULL),
               (array_agg(v.problem ORDER BY v.ord) FILTER (WHERE v.problem IS NOT NULL))[1:1],
               count(*) FILTER (WHERE v.idempotency_key IS NOT NULL),
               coalesce(array_agg(jobqueue.resolve_job(
                   v.ord, v.id, v.job_type, v.payload, v.priority, v.run_at, v.delay, v.queue,
                   v.max_attempts, v.idempotency_key, v.producer_id, v.traceparent, v.timeout, v.expires_at,
                   v.expire_after, v.idempotency_window, v.idempotency_mismatch, d.max_attempts) ORDER BY v.ord), '{}')
          INTO bad, problem, keyed, inputs
          FROM (SELECT f.*, jobqueue.job_problem(f.job_type, f.priority, f.run_at, f.delay, f.queue, f.max_attempts,
                                                 f.idempotency_key, f.timeout, f.expires_at, f.expire_after,
                                                 f.idempotency_window, f.idempotency_mismatch) AS problem
                FROM (SELECT e.ord::integer AS ord, jobqueue.uuid_v7(e.ord) AS id,
                             e.job->>'job_type' AS job_type, e.job->'payload' AS payload,
                             e.job->>'priority' AS priority, (e.job->>'run_at')::timestamptz AS run_at,
                             (e.job->>'delay')::interval AS delay, coalesce(e.job->>'queue', 'default') AS queue,
                             (e.job->>'max_attempts')::integer AS max_attempts,
                             e.job->>'idempotency_key' AS idempotency_key, e.job->>'producer_id' AS producer_id,
                             e.job->>'traceparent' AS traceparent, (e.job->>'timeout')::interval AS timeout,
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
        PERFORM jobqueue.invalid(format('jobs[%s].%s', bad - 1, problem[1][1]), problem[1][2]);
    END IF;
    RETURN QUERY SELECT r.id, r.created FROM jobqueue.insert_jobs(inputs, keyed) AS r ORDER BY r.ord;
END $$;
