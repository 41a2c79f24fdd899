-- 0035 undone: no ordering keys (a waiting job becomes pending), no progress; the functions as the
-- revisions before it left them (cancel as 0032 wrote it).
DROP VIEW jobqueue.ordering_keys;
DROP TRIGGER jobs_ordering_released ON jobqueue.jobs;
DROP TRIGGER jobs_ordering_deleted ON jobqueue.jobs;
DROP FUNCTION jobqueue.ordering_key_released();
DROP FUNCTION jobqueue.ordering_key_revived(jobqueue.jobs);
DROP FUNCTION jobqueue.ordering_waiters(jobqueue.job_input[], jsonb);
DROP FUNCTION jobqueue.lock_ordering_key(text, text);
DROP FUNCTION jobqueue.ordering_key_problem(text);
DROP FUNCTION jobqueue.enqueue(text, text, text, timestamptz, text, integer, text, interval, text, text, interval,
                               timestamptz, interval, interval, text, text);
DROP FUNCTION jobqueue.enqueue(text, jsonb, text, timestamptz, text, integer, text, interval, text, text, interval,
                               timestamptz, interval, interval, text, text);
DROP FUNCTION jobqueue.enqueue_unchecked(text, jsonb, text, timestamptz, text, integer, text, interval, text, text,
                                         interval, timestamptz, interval, interval, text, text);
DROP INDEX jobqueue.jobs_ordering_idx;
UPDATE jobqueue.jobs SET state = 'pending' WHERE state = 'waiting';
ALTER TABLE jobqueue.jobs DROP CONSTRAINT jobs_state_known;
ALTER TABLE jobqueue.jobs ADD CONSTRAINT jobs_state_known
    CHECK (state = ANY (ARRAY['pending', 'processing', 'completed', 'failed', 'dead_letter', 'cancelled']));
ALTER TABLE jobqueue.jobs DROP COLUMN ordering_key;
ALTER TABLE jobqueue.jobs DROP COLUMN progress;
DROP FUNCTION jobqueue.resolve_job(integer, uuid, text, jsonb, text, timestamptz, interval, text, integer, text, text,
                                   text, interval, timestamptz, interval, interval, text, integer, text);
ALTER TYPE jobqueue.job_input DROP ATTRIBUTE ordering_key;

CREATE FUNCTION jobqueue.resolve_job(ord integer, id uuid, job_type text, payload jsonb, priority text, run_at timestamp with time zone, delay interval, queue text, max_attempts integer, idempotency_key text, producer_id text, traceparent text, timeout interval, expires_at timestamp with time zone, expire_after interval, idempotency_window interval, idempotency_mismatch text, default_max_attempts integer) RETURNS jobqueue.job_input
    LANGUAGE sql STABLE
    AS $$
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

CREATE FUNCTION jobqueue.enqueue_unchecked(job_type text, payload jsonb DEFAULT '{}'::jsonb, priority text DEFAULT 'normal'::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, queue text DEFAULT 'default'::text, max_attempts integer DEFAULT NULL::integer, idempotency_key text DEFAULT NULL::text, delay interval DEFAULT NULL::interval, producer_id text DEFAULT NULL::text, traceparent text DEFAULT NULL::text, timeout interval DEFAULT NULL::interval, expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, expire_after interval DEFAULT NULL::interval, idempotency_window interval DEFAULT NULL::interval, idempotency_mismatch text DEFAULT NULL::text) RETURNS uuid
    LANGUAGE plpgsql
    AS $$
DECLARE
    problem text[] := jobqueue.job_problem(job_type, priority, run_at, delay, queue, max_attempts, idempotency_key,
                                           timeout, expires_at, expire_after, idempotency_window, idempotency_mismatch,
                                           producer_id, traceparent, payload);
    job_id uuid;
    wanted boolean;
    gated boolean;
BEGIN
    IF problem IS NOT NULL THEN
        PERFORM jobqueue.invalid(problem[1], problem[2]);
    END IF;
    IF idempotency_key IS NOT NULL THEN  -- the gates probed in the statement, as below
        SELECT r.id, EXISTS (SELECT FROM jobqueue.queue_gates g WHERE g.until > now())
          INTO job_id, gated
          FROM jobqueue.insert_jobs(ARRAY[jobqueue.make_job_input(
            NULL, job_type, payload, priority, jobqueue.due_at(run_at), delay, queue, max_attempts, idempotency_key,
            producer_id, traceparent, timeout, expires_at, expire_after, idempotency_window,
            idempotency_mismatch)]) AS r;
        IF gated THEN
            PERFORM jobqueue.refuse_gated_queues(ARRAY[queue], ARRAY[job_id]);
        END IF;
        RETURN job_id;
    END IF;
    -- Without a key, the common case: one statement resolves the defaults, inserts the job and
    -- reads what job_events_wanted() would say (each statement a plpgsql function runs costs), and
    -- whether a gate is closed anywhere (jobqueue.queue_gates, empty while nothing is full). Probing
    -- the gates after the insert, in this statement, costs nothing measurable; probing them for
    -- this queue before it cost a tenth of the call. A refusal raises, which undoes the insert.
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
    SELECT a.id, EXISTS (SELECT FROM jobqueue.event_listeners l WHERE l.expires_at > now()),
           EXISTS (SELECT FROM jobqueue.queue_gates g WHERE g.until > now())
      INTO job_id, wanted, gated
      FROM added AS a;
    IF gated THEN  -- refused (and the insert undone), unless only new queues are and this one is known
        PERFORM jobqueue.refuse_gated_queues(ARRAY[queue], ARRAY[job_id]);
    END IF;
    PERFORM pg_notify('jobqueue_jobs', queue);
    IF wanted THEN
        PERFORM jobqueue.emit_job_events(ARRAY['job.queued'], ARRAY[queue], ARRAY[producer_id], ARRAY[job_id]);
    END IF;
    RETURN job_id;
END $$;

COMMENT ON FUNCTION jobqueue.enqueue_unchecked(job_type text, payload jsonb, priority text, run_at timestamp with time zone, queue text, max_attempts integer, idempotency_key text, delay interval, producer_id text, traceparent text, timeout interval, expires_at timestamp with time zone, expire_after interval, idempotency_window interval, idempotency_mismatch text) IS 'Enqueue one job inside the caller''s transaction; returns its id (or, within the idempotency window, the id of the job first submitted with the same key).';

CREATE FUNCTION jobqueue.enqueue(job_type text, payload jsonb DEFAULT '{}'::jsonb, priority text DEFAULT 'normal'::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, queue text DEFAULT 'default'::text, max_attempts integer DEFAULT NULL::integer, idempotency_key text DEFAULT NULL::text, delay interval DEFAULT NULL::interval, producer_id text DEFAULT NULL::text, traceparent text DEFAULT NULL::text, timeout interval DEFAULT NULL::interval, expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, expire_after interval DEFAULT NULL::interval, idempotency_window interval DEFAULT NULL::interval, idempotency_mismatch text DEFAULT NULL::text) RETURNS uuid
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN jobqueue.enqueue_unchecked(job_type, payload, priority, run_at, queue, max_attempts, idempotency_key, delay,
                                      jobqueue.acting_producer(producer_id), traceparent, timeout, expires_at,
                                      expire_after, idempotency_window, idempotency_mismatch);
END $$;

COMMENT ON FUNCTION jobqueue.enqueue(job_type text, payload jsonb, priority text, run_at timestamp with time zone, queue text, max_attempts integer, idempotency_key text, delay interval, producer_id text, traceparent text, timeout interval, expires_at timestamp with time zone, expire_after interval, idempotency_window interval, idempotency_mismatch text) IS 'Enqueue one job inside the caller''s transaction; returns its id (or, within the idempotency window, the id of the job first submitted with the same key). A producer role''s job is its own (producer_id defaults to it; another is refused).';

CREATE FUNCTION jobqueue.enqueue(job_type text, payload text, priority text DEFAULT 'normal'::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, queue text DEFAULT 'default'::text, max_attempts integer DEFAULT NULL::integer, idempotency_key text DEFAULT NULL::text, delay interval DEFAULT NULL::interval, producer_id text DEFAULT NULL::text, traceparent text DEFAULT NULL::text, timeout interval DEFAULT NULL::interval, expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, expire_after interval DEFAULT NULL::interval, idempotency_window interval DEFAULT NULL::interval, idempotency_mismatch text DEFAULT NULL::text) RETURNS uuid
    LANGUAGE plpgsql
    AS $$
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
    IF jsonb_array_length(jobs) > 10000 THEN
        PERFORM jobqueue.invalid('jobs', format('must hold at most 10000 jobs (got %s)', jsonb_array_length(jobs)));
    END IF;
    -- Every job validated and resolved in one query (the OFFSET 0 fences keep each field read
    -- once per job, and the ids made in the jobs' order whatever join the planner picks); nothing
    -- is written unless all of them are valid. (Fields it does not know are ignored: finding them,
    -- jsonb - text[] per job, cost 6 % of a bulk enqueue's CPU; Python and REST refuse them.)
    -- A job may carry its own "id" (a producer that seals fields for it made it first, 0025): a
    -- version-7 UUID made within the hour, cast only once given_id_problem() found nothing wrong.
    BEGIN
        SELECT min(v.ord) FILTER (WHERE v.problem IS NOT NULL),
               (array_agg(v.problem ORDER BY v.ord) FILTER (WHERE v.problem IS NOT NULL))[1:1],
               count(*) FILTER (WHERE v.idempotency_key IS NOT NULL),
               coalesce(array_agg(jobqueue.resolve_job(
                   v.ord, coalesce(CASE WHEN v.problem IS NULL THEN v.id_text::uuid END, v.id), v.job_type, v.payload,
                   v.priority, jobqueue.due_at(v.run_at), v.delay, v.queue,
                   v.max_attempts, v.idempotency_key, v.producer_id, v.traceparent, v.timeout, v.expires_at,
                   v.expire_after, v.idempotency_window, v.idempotency_mismatch, d.max_attempts) ORDER BY v.ord), '{}')
          INTO bad, problem, keyed, inputs
          FROM (SELECT f.*, coalesce(
                           jobqueue.job_problem(f.job_type, f.priority, f.run_at, f.delay, f.queue,
                                                f.max_attempts, f.idempotency_key, f.timeout, f.expires_at,
                                                f.expire_after, f.idempotency_window, f.idempotency_mismatch,
                                                f.producer_id, f.traceparent, f.payload),
                           jobqueue.zoneless_problem('run_at', f.run_at_text),
                           jobqueue.zoneless_problem('expires_at', f.expires_at_text),
                           jobqueue.given_id_problem(f.id_text)) AS problem
                FROM (SELECT e.ord::integer AS ord, jobqueue.uuid_v7(e.ord) AS id, e.job->>'id' AS id_text,
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
    IF EXISTS (SELECT FROM jobqueue.queue_gates g WHERE g.until > now()) THEN  -- empty while nothing is full
        PERFORM jobqueue.refuse_gated_queues(ARRAY(SELECT DISTINCT i.queue FROM unnest(inputs) AS i));
    END IF;
    RETURN QUERY SELECT r.id, r.created FROM jobqueue.insert_jobs(inputs, keyed) AS r ORDER BY r.ord;
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
        -- Some jobs are answered with the id of the job holding their key: a row this node has,
        -- maybe alone. One WAL record written under a transaction id makes this transaction's
        -- commit write its commit record, flush it and wait for the synchronous standbys, as a
        -- first write's does, so the answer is never given before the holder is as durable as a
        -- new job would be. (A transaction id alone is not enough: a commit that wrote no WAL
        -- before its commit record neither flushes nor waits. A transactional logical message
        -- takes one and touches no table, no page and no lock; decoding plugins see it with the
        -- prefix jobqueue.repeat.)
        PERFORM pg_catalog.pg_logical_emit_message(true, 'jobqueue.repeat', '');
        RETURN QUERY
            SELECT i.ord, coalesce((held->>i.ord::text)::uuid, i.id), NOT held ? i.ord::text
            FROM unnest(jobs) AS i
            ORDER BY i.ord;
    END IF;
END $$;

CREATE OR REPLACE FUNCTION jobqueue.cancel(job_id uuid) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    held text := jobqueue.session_producer();
    found_job record;
BEGIN
    -- Another producer's job does not exist for a producer role.
    SELECT j.state, j.queue, j.job_type, j.producer_id INTO found_job FROM jobqueue.jobs j
     WHERE j.id = job_id AND (held IS NULL OR j.producer_id = held) FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'not_found';
    ELSIF found_job.state IN ('pending', 'failed') THEN
        UPDATE jobqueue.jobs SET state = 'cancelled', finished_at = now(), updated_at = now()
         WHERE id = job_id;
        PERFORM jobqueue.audit('job.cancel', job_id::text, jsonb_build_object(
            'outcome', 'cancelled', 'state', found_job.state, 'queue', found_job.queue, 'job_type', found_job.job_type,
            'producer_id', found_job.producer_id));
        RETURN 'cancelled';
    ELSIF found_job.state = 'processing' THEN
        UPDATE jobqueue.jobs SET cancel_requested = true, updated_at = now() WHERE id = job_id;
        PERFORM pg_notify('jobqueue_cancel', job_id::text);
        PERFORM jobqueue.audit('job.cancel', job_id::text, jsonb_build_object(
            'outcome', 'cancel_requested', 'state', found_job.state, 'queue', found_job.queue,
            'job_type', found_job.job_type, 'producer_id', found_job.producer_id));
        RETURN 'cancel_requested';
    ELSIF found_job.state = 'cancelled' THEN
        RETURN 'cancelled_already';
    ELSE
        RETURN found_job.state;
    END IF;
END $$;

REVOKE EXECUTE ON FUNCTION jobqueue.enqueue(text, jsonb, text, timestamptz, text, integer, text, interval, text, text,
                                            interval, timestamptz, interval, interval, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobqueue.enqueue(text, jsonb, text, timestamptz, text, integer, text, interval, text, text,
                                           interval, timestamptz, interval, interval, text)
    TO jobqueue_producer, jobqueue_worker, jobqueue_admin, jobqueue_api;
COMMENT ON FUNCTION jobqueue.resolve_job(ord integer, id uuid, job_type text, payload jsonb, priority text, run_at timestamp with time zone, delay interval, queue text, max_attempts integer, idempotency_key text, producer_id text, traceparent text, timeout interval, expires_at timestamp with time zone, expire_after interval, idempotency_window interval, idempotency_mismatch text, default_max_attempts integer) IS 'A valid job''s enqueue fields with their defaults applied (priority level, run_at, max_attempts, expiry); the queue''s job_ttl is applied by the insert.';
