-- 0024_quotas (issue 18, "Quotas hold on every path"): what the REST API refuses, SQL refuses too.
--
-- 1. A payload is at most 1 MiB (1,048,576 bytes) as stored jsonb (pg_column_size, O(1)): a SQL
--    producer stored a 20 MB payload, past anything the API's 1 MiB body limit lets through, and
--    every worker that claims it loads it. payload_problem() joins job_problem(), the one
--    validation expression of every enqueue path (so job_problem takes the payload now), and a
--    schedule's payload is held to it when the schedule is defined (no schedule whose every fire
--    would be refused).
-- 2. enqueue_many() takes at most 10,000 jobs (50,000 went in one statement: one statement's worth
--    of work nobody bounded, and a way past any depth limit at once).
-- 3. Hard limits for SQL: jobqueue.queue_gates holds the gates the maintenance leader (its
--    Gatekeeper) found closed at its last count of waiting jobs — a queue at its hard limit, all
--    queues at the total hard limit, or too many queues that no worker serves and no admin
--    configured (then only new queue names are refused). Every enqueue path probes the table (empty
--    while nothing is full; on the single enqueue's common path in the statement that inserts the
--    job, which a refusal undoes) and refuses with SQLSTATE 53400, DETAIL {"reason", "queue"}. A row
--    counts only until its `until`: a leader gone must not hold a queue shut for ever.
-- 4. set_login_timeouts(): `jobqueue roles login` gives the logins it makes a statement and an
--    idle-in-transaction timeout in this database (there were none: a producer session could run a
--    statement, or hold a transaction and the xmin horizon, for ever).

CREATE FUNCTION jobqueue.payload_problem(payload jsonb) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN pg_column_size(payload) > 1048576
        THEN format('must be at most 1048576 bytes as stored (1 MiB of jsonb; got %s)', pg_column_size(payload))
    END
$$;
COMMENT ON FUNCTION jobqueue.payload_problem(jsonb) IS 'Why a payload is refused (NULL: it is fine): more than 1 MiB as stored jsonb.';

DROP FUNCTION jobqueue.job_problem(text, text, timestamptz, interval, text, integer, text, interval, timestamptz,
                                   interval, interval, text, text, text);
CREATE FUNCTION jobqueue.job_problem(job_type text, priority text, run_at timestamp with time zone, delay interval,
                                     queue text, max_attempts integer, idempotency_key text, timeout interval,
                                     expires_at timestamp with time zone, expire_after interval,
                                     idempotency_window interval, idempotency_mismatch text,
                                     producer_id text, traceparent text, payload jsonb) RETURNS text[]
LANGUAGE sql STABLE AS $$
    -- expires_at is compared with the run_at the job will have: one in the past means now.
    SELECT CASE
        WHEN jobqueue.name_problem(job_type, 255) IS NOT NULL
            THEN ARRAY['job_type', jobqueue.name_problem(job_type, 255)]
        WHEN jobqueue.name_problem(queue, 255) IS NOT NULL THEN ARRAY['queue', jobqueue.name_problem(queue, 255)]
        WHEN jobqueue.payload_problem(payload) IS NOT NULL THEN ARRAY['payload', jobqueue.payload_problem(payload)]
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
        WHEN length(traceparent) <> 55
            THEN ARRAY['traceparent', format('must be a W3C traceparent of 55 characters (got %s)', length(traceparent))]
        WHEN traceparent !~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$' OR left(traceparent, 2) = 'ff'
             OR substr(traceparent, 4, 32) = repeat('0', 32) OR substr(traceparent, 37, 16) = repeat('0', 16)
            THEN ARRAY['traceparent', 'must be a W3C traceparent: version-traceid-parentid-flags in lowercase hex '
                                      '(00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01), a version other '
                                      'than ff, ids not all zeros']
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
COMMENT ON FUNCTION jobqueue.job_problem(text, text, timestamptz, interval, text, integer, text, interval, timestamptz, interval, interval, text, text, text, jsonb) IS 'The first problem of a job''s enqueue fields as {field, message}, or NULL: every enqueue path''s validation, one expression the planner inlines (so enqueue_many checks all its jobs in one query).';

-- The gates.
CREATE TABLE jobqueue.queue_gates (
    queue text NOT NULL,
    reason text NOT NULL,
    waiting bigint NOT NULL,
    quota bigint NOT NULL,
    counted_at timestamptz NOT NULL,
    until timestamptz NOT NULL,
    PRIMARY KEY (queue, reason),
    CONSTRAINT queue_gates_reason_known CHECK (reason IN ('queue_full', 'total_full', 'too_many_queues')),
    -- '' is every queue: no queue can be named so (name_problem refuses a blank name).
    CONSTRAINT queue_gates_all_queues CHECK ((queue = '') = (reason <> 'queue_full'))
);
COMMENT ON TABLE jobqueue.queue_gates IS 'Enqueue gates the maintenance leader found closed at its last count of waiting jobs (pending, scheduled or waiting for a retry): a queue at its hard limit (queue_full), all queues at the total hard limit (total_full, queue ''''), too many queues no worker serves and no admin configured (too_many_queues, queue '''': new queue names are refused). A row counts until its until.';
COMMENT ON COLUMN jobqueue.queue_gates.waiting IS 'What the count found: the queue''s waiting jobs, all queues'' together, or how many undeclared queues hold jobs.';
COMMENT ON COLUMN jobqueue.queue_gates.quota IS 'The limit that count reached.';
GRANT SELECT, INSERT, UPDATE, DELETE ON jobqueue.queue_gates TO jobqueue_worker, jobqueue_admin;
GRANT SELECT ON jobqueue.queue_gates TO jobqueue_api, jobqueue_readonly;

CREATE FUNCTION jobqueue.refuse_gated_queues(queues text[], inserted uuid[] DEFAULT '{}') RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
    gate jobqueue.queue_gates;
    unknown text;
BEGIN
    FOR gate IN SELECT g.* FROM jobqueue.queue_gates g
                WHERE (g.queue = '' OR g.queue = ANY(queues)) AND g.until > now()
                ORDER BY g.reason, g.queue LOOP
        IF gate.reason = 'too_many_queues' THEN
            -- Only a new queue is refused: none of its jobs wait (but those this statement just
            -- inserted), no live worker serves it, no admin configured it.
            SELECT q.name INTO unknown FROM unnest(queues) AS q(name)
             WHERE NOT EXISTS (SELECT FROM jobqueue.queue_settings s WHERE s.queue = q.name)
               AND NOT EXISTS (SELECT FROM jobqueue.jobs j WHERE j.state IN ('pending', 'failed') AND j.queue = q.name
                                                             AND j.id <> ALL(inserted))
               AND NOT EXISTS (SELECT FROM jobqueue.workers w
                               WHERE q.name = ANY(w.queues) AND w.status IN ('running', 'stopping'))
             LIMIT 1;
            CONTINUE WHEN unknown IS NULL;
            RAISE EXCEPTION USING ERRCODE = 'configuration_limit_exceeded', COLUMN = 'queue',
                DETAIL = json_build_object('reason', gate.reason, 'queue', unknown),
                MESSAGE = format('jobqueue: queue: %L is a new queue, and %s queues that no worker serves and no admin '
                                 'configured hold jobs already (at most %s); nothing was written', unknown, gate.waiting,
                                 gate.quota);
        ELSIF gate.reason = 'total_full' THEN
            RAISE EXCEPTION USING ERRCODE = 'configuration_limit_exceeded', COLUMN = 'queue',
                DETAIL = json_build_object('reason', gate.reason, 'queue', NULL),
                MESSAGE = format('jobqueue: queue: the queues hold %s waiting jobs in all (limit %s across queues); '
                                 'nothing was written', gate.waiting, gate.quota);
        ELSE
            RAISE EXCEPTION USING ERRCODE = 'configuration_limit_exceeded', COLUMN = 'queue',
                DETAIL = json_build_object('reason', gate.reason, 'queue', gate.queue),
                MESSAGE = format('jobqueue: queue: %L is at its hard limit (%s waiting jobs, limit %s); nothing was '
                                 'written', gate.queue, gate.waiting, gate.quota);
        END IF;
    END LOOP;
END $$;
COMMENT ON FUNCTION jobqueue.refuse_gated_queues(text[], uuid[]) IS 'Raise (SQLSTATE 53400; DETAIL {"reason", "queue"} as JSON) if a gate of jobqueue.queue_gates is closed for any of these queues; returns when all may take jobs (the jobs inserted: not counted as waiting in them).';

CREATE OR REPLACE FUNCTION jobqueue.make_job_input(ord integer, job_type text, payload jsonb, priority text, run_at timestamp with time zone, delay interval, queue text, max_attempts integer, idempotency_key text, producer_id text, traceparent text, timeout interval DEFAULT NULL::interval, expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, expire_after interval DEFAULT NULL::interval, idempotency_window interval DEFAULT NULL::interval, idempotency_mismatch text DEFAULT NULL::text) RETURNS jobqueue.job_input
    LANGUAGE plpgsql
    AS $$
DECLARE
    problem text[] := jobqueue.job_problem(job_type, priority, run_at, delay, queue, max_attempts, idempotency_key,
                                           timeout, expires_at, expire_after, idempotency_window, idempotency_mismatch,
                                           producer_id, traceparent, payload);
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
                                                f.producer_id, f.traceparent, f.payload),
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
    IF EXISTS (SELECT FROM jobqueue.queue_gates g WHERE g.until > now()) THEN  -- empty while nothing is full
        PERFORM jobqueue.refuse_gated_queues(ARRAY(SELECT DISTINCT i.queue FROM unnest(inputs) AS i));
    END IF;
    RETURN QUERY SELECT r.id, r.created FROM jobqueue.insert_jobs(inputs, keyed) AS r ORDER BY r.ord;
END $$;

-- A schedule's payload, as its job_type and queue: held to the enqueue's bound when it is defined.
CREATE FUNCTION jobqueue.schedules_payload_bound() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF jobqueue.payload_problem(NEW.payload) IS NOT NULL THEN
        PERFORM jobqueue.invalid('payload', jobqueue.payload_problem(NEW.payload));
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER schedules_payload_bound BEFORE INSERT OR UPDATE OF payload ON jobqueue.schedules
    FOR EACH ROW EXECUTE FUNCTION jobqueue.schedules_payload_bound();

-- The timeouts of a login `jobqueue roles login` makes, in this database (its connections' defaults:
-- a session may still SET its own, and jobqueue's processes send theirs as startup options).
CREATE FUNCTION jobqueue.set_login_timeouts(login text, statement_timeout interval, idle_timeout interval) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF login IS NULL OR NOT EXISTS (SELECT FROM pg_roles WHERE rolname = login AND rolcanlogin AND NOT rolsuper) THEN
        PERFORM jobqueue.invalid('login_role', format('no login role named %s that is not a superuser', login));
    END IF;
    IF statement_timeout IS NULL OR statement_timeout < interval '0' OR statement_timeout > interval '24 hours' THEN
        PERFORM jobqueue.invalid('statement_timeout', format('must be from 0 (none) to 24 hours (got %s)', statement_timeout));
    END IF;
    IF idle_timeout IS NULL OR idle_timeout < interval '0' OR idle_timeout > interval '24 hours' THEN
        PERFORM jobqueue.invalid('idle_timeout', format('must be from 0 (none) to 24 hours (got %s)', idle_timeout));
    END IF;
    EXECUTE format('ALTER ROLE %I IN DATABASE %I SET statement_timeout = %L', login, current_database(),
                   ceil(extract(epoch FROM statement_timeout) * 1000)::bigint || 'ms');
    EXECUTE format('ALTER ROLE %I IN DATABASE %I SET idle_in_transaction_session_timeout = %L', login,
                   current_database(), ceil(extract(epoch FROM idle_timeout) * 1000)::bigint || 'ms');
END $$;
COMMENT ON FUNCTION jobqueue.set_login_timeouts(text, interval, interval) IS 'Give a login role a statement_timeout and an idle_in_transaction_session_timeout in this database (0: none); `jobqueue roles login` calls it.';
REVOKE EXECUTE ON FUNCTION jobqueue.set_login_timeouts(text, interval, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobqueue.set_login_timeouts(text, interval, interval) TO jobqueue_admin;
