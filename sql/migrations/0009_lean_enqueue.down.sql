-- Back to 0008: uuid_v7() as before, the insert triggers, the per-job plpgsql validation.

DROP FUNCTION jobqueue.uuid_v7(bigint);

CREATE OR REPLACE FUNCTION jobqueue.uuid_v7() RETURNS uuid
    LANGUAGE sql PARALLEL SAFE
    AS $$
    -- RFC 9562 UUIDv7 with sub-millisecond precision (method 3): 48 bits of Unix milliseconds,
    -- the version (7) and 12 bits of the millisecond's fraction, then the variant and 62 random
    -- bits (those of a v4 UUID, whose variant bits are already right).
    SELECT encode(substring(int8send(t.ms) FROM 3)
                  || int2send((28672 + floor((t.exact - t.ms) * 4096))::smallint)
                  || substring(uuid_send(gen_random_uuid()) FROM 9), 'hex')::uuid
    FROM (SELECT floor(e)::bigint AS ms, e AS exact
          FROM (SELECT extract(epoch FROM clock_timestamp()) * 1000 AS e) AS now_ms) AS t
$$;


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


CREATE OR REPLACE FUNCTION jobqueue.enqueue(job_type text, payload jsonb DEFAULT '{}'::jsonb, priority text DEFAULT 'normal'::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, queue text DEFAULT 'default'::text, max_attempts integer DEFAULT NULL::integer, idempotency_key text DEFAULT NULL::text, delay interval DEFAULT NULL::interval, producer_id text DEFAULT NULL::text, traceparent text DEFAULT NULL::text, timeout interval DEFAULT NULL::interval, expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, expire_after interval DEFAULT NULL::interval, idempotency_window interval DEFAULT NULL::interval, idempotency_mismatch text DEFAULT NULL::text) RETURNS uuid
    LANGUAGE sql
    AS $$
    SELECT r.id FROM jobqueue.insert_jobs(ARRAY[jobqueue.make_job_input(
        NULL, job_type, payload, priority, run_at, delay, queue, max_attempts,
        idempotency_key, producer_id, traceparent, timeout, expires_at, expire_after,
        idempotency_window, idempotency_mismatch)]) AS r
$$;


CREATE OR REPLACE FUNCTION jobqueue.enqueue_many(jobs jsonb) RETURNS TABLE(id uuid, created boolean)
    LANGUAGE plpgsql
    AS $$
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


DROP FUNCTION jobqueue.announce_new_jobs(text[], text[], uuid[]);

DROP FUNCTION jobqueue.resolve_job(integer, uuid, text, jsonb, text, timestamp with time zone, interval, text, integer, text, text, text, interval, timestamp with time zone, interval, interval, text, integer);

DROP FUNCTION jobqueue.job_problem(text, text, timestamp with time zone, interval, text, integer, text, interval, timestamp with time zone, interval, interval, text);

CREATE FUNCTION jobqueue.job_events_on_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NOT jobqueue.job_events_wanted() THEN
        RETURN NULL;
    END IF;
    PERFORM jobqueue.emit_job_events(array_agg('job.queued'::text), array_agg(n.queue), array_agg(n.producer_id),
                                     array_agg(n.id))
    FROM new_jobs n
    HAVING count(*) > 0;
    RETURN NULL;
END $$;


CREATE FUNCTION jobqueue.notify_new_jobs() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('jobqueue_jobs', q.queue) FROM (SELECT DISTINCT n.queue FROM new_jobs n) AS q;
    RETURN NULL;
END $$;


CREATE TRIGGER jobs_events_insert AFTER INSERT ON jobqueue.jobs REFERENCING NEW TABLE AS new_jobs FOR EACH STATEMENT EXECUTE FUNCTION jobqueue.job_events_on_insert();

CREATE TRIGGER jobs_notify_insert AFTER INSERT ON jobqueue.jobs REFERENCING NEW TABLE AS new_jobs FOR EACH STATEMENT EXECUTE FUNCTION jobqueue.notify_new_jobs();

CREATE OR REPLACE FUNCTION jobqueue.job_events_wanted() RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
    SELECT EXISTS (SELECT 1 FROM jobqueue.event_listeners WHERE expires_at > now())
$$;
