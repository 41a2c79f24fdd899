-- Least-privilege PostgreSQL roles with row-level isolation (issue 11; docs/security.md "Roles").
--
-- Five group roles (NOLOGIN): login roles are granted one (`jobqueue roles grant`), and nothing
-- but migrations needs the owner of the jobqueue schema any more.
--   jobqueue_producer  enqueue, cancel, read its own jobs, results and errors — nothing else
--   jobqueue_worker    claim, heartbeat, ack, registry, leader rows, the leader's maintenance
--   jobqueue_admin     everything an operator does: DLQ, queues, schedules, circuits, API keys
--   jobqueue_api       the REST API: acts for every producer and for admin keys, reads API keys
--   jobqueue_readonly  reads every table and view but the API keys
--
-- Roles are cluster-wide, grants are per database: the roles are created only when missing (a
-- second database in the same cluster, or two migrating at once, finds them made), and the
-- downgrade drops one only when no database still refers to it (see the .down.sql).
--
-- Producers never write a table: they enqueue and cancel through SECURITY DEFINER functions with
-- a pinned search_path, which fix the producer id to the caller's own. They read jobs, results
-- and errors under row-level security keyed by that id. The id is the LOGIN role's name
-- (session_user, which SET ROLE does not change), or the producer id `jobqueue roles grant
-- --producer` mapped it to in jobqueue.producer_roles — not a setting, which any session could
-- set to another producer's name. Workers, the API, admins and readers get a policy that lets
-- every row through (USING true: the planner drops it, so the claim and the ack cost nothing
-- more); the owner bypasses row-level security as before.

DO $$
DECLARE
    name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['jobqueue_producer', 'jobqueue_worker', 'jobqueue_admin', 'jobqueue_api',
                                'jobqueue_readonly'] LOOP
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = name) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', name);
            EXCEPTION
                WHEN duplicate_object OR unique_violation THEN NULL;  -- another database's migration made it just now
                WHEN insufficient_privilege THEN
                    RAISE EXCEPTION 'jobqueue: role % does not exist and this role may not create it', name
                        USING ERRCODE = 'insufficient_privilege',
                              HINT = 'migrate as a role with CREATEROLE, or have a superuser run '
                                     'CREATE ROLE jobqueue_producer NOLOGIN (and worker, admin, api, readonly) once per cluster';
            END;
        END IF;
    END LOOP;
END $$;

-- Which producer a login role acts as, when not its own name (`jobqueue roles grant --producer`).
CREATE TABLE jobqueue.producer_roles (
    role_name text PRIMARY KEY,
    producer_id text NOT NULL CONSTRAINT producer_roles_producer_present CHECK (length(producer_id) BETWEEN 1 AND 200),
    created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE jobqueue.producer_roles IS 'The producer id a jobqueue_producer login role acts as in SQL (default: the role''s name); see docs/security.md "Roles".';

-- plpgsql, not sql: it runs on every enqueue, and a SECURITY DEFINER sql function is planned afresh
-- at each call (~90 µs, a third of a single enqueue), where plpgsql keeps its plans for the session.
CREATE FUNCTION jobqueue.session_producer() RETURNS text
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
BEGIN
    IF pg_has_role(session_user, 'jobqueue_worker', 'USAGE') OR pg_has_role(session_user, 'jobqueue_api', 'USAGE')
       OR pg_has_role(session_user, 'jobqueue_admin', 'USAGE')
       OR pg_has_role(session_user, (SELECT c.relowner FROM pg_class c WHERE c.oid = 'jobqueue.jobs'::regclass), 'USAGE') THEN
        RETURN NULL;
    END IF;
    RETURN coalesce((SELECT r.producer_id FROM jobqueue.producer_roles r WHERE r.role_name = session_user),
                    session_user::text);
END $$;
COMMENT ON FUNCTION jobqueue.session_producer() IS 'The producer id this session is held to (its login role''s name, or its producer_roles mapping); NULL for the owner, workers, the API and admins, which act for any producer.';

-- The one-job and many-job enqueue keep their bodies under new names (SECURITY INVOKER: a role
-- without INSERT on jobqueue.jobs cannot call them usefully); the public names become wrappers.
-- enqueue()'s body names its parameters after the function (enqueue.queue), so it cannot simply be
-- renamed: its current definition, whichever migration wrote it last, is restated under the new
-- name. A later migration that changes how jobs are enqueued changes enqueue_unchecked() (and
-- enqueue_many_unchecked()), not the wrappers.
DO $$
DECLARE
    original constant regprocedure := 'jobqueue.enqueue(text, jsonb, text, timestamptz, text, integer, text, interval, text, text, interval, timestamptz, interval, interval, text)';
    definition text := pg_get_functiondef(original);
BEGIN
    definition := replace(definition, 'FUNCTION jobqueue.enqueue(', 'FUNCTION jobqueue.enqueue_unchecked(');
    definition := regexp_replace(definition, '\menqueue\.', 'enqueue_unchecked.', 'g');
    EXECUTE definition;
    EXECUTE format('COMMENT ON FUNCTION jobqueue.enqueue_unchecked(text, jsonb, text, timestamptz, text, integer, text, interval, text, text, interval, timestamptz, interval, interval, text) IS %L',
                   obj_description(original, 'pg_proc'));
END $$;

ALTER FUNCTION jobqueue.enqueue_many(jsonb) RENAME TO enqueue_many_unchecked;

CREATE FUNCTION jobqueue.acting_producer(requested text) RETURNS text
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    held text := jobqueue.session_producer();
BEGIN
    IF held IS NOT NULL AND requested IS NOT NULL AND requested <> held THEN
        RAISE EXCEPTION 'jobqueue: producer_id: role % enqueues as producer %, not %', session_user,
                        quote_literal(held), quote_literal(requested)
            USING ERRCODE = 'insufficient_privilege', COLUMN = 'producer_id';
    END IF;
    RETURN coalesce(held, requested);
END $$;
COMMENT ON FUNCTION jobqueue.acting_producer(text) IS 'The producer id a job enqueued by this session gets: the one asked for, except that a producer role is held to its own (asking for another is refused).';

CREATE OR REPLACE FUNCTION jobqueue.enqueue(job_type text, payload jsonb DEFAULT '{}'::jsonb, priority text DEFAULT 'normal'::text,
                                 run_at timestamp with time zone DEFAULT NULL::timestamp with time zone,
                                 queue text DEFAULT 'default'::text, max_attempts integer DEFAULT NULL::integer,
                                 idempotency_key text DEFAULT NULL::text, delay interval DEFAULT NULL::interval,
                                 producer_id text DEFAULT NULL::text, traceparent text DEFAULT NULL::text,
                                 timeout interval DEFAULT NULL::interval,
                                 expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone,
                                 expire_after interval DEFAULT NULL::interval,
                                 idempotency_window interval DEFAULT NULL::interval,
                                 idempotency_mismatch text DEFAULT NULL::text) RETURNS uuid
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
BEGIN
    RETURN jobqueue.enqueue_unchecked(job_type, payload, priority, run_at, queue, max_attempts, idempotency_key, delay,
                                      jobqueue.acting_producer(producer_id), traceparent, timeout, expires_at,
                                      expire_after, idempotency_window, idempotency_mismatch);
END $$;
COMMENT ON FUNCTION jobqueue.enqueue(job_type text, payload jsonb, priority text, run_at timestamp with time zone, queue text, max_attempts integer, idempotency_key text, delay interval, producer_id text, traceparent text, timeout interval, expires_at timestamp with time zone, expire_after interval, idempotency_window interval, idempotency_mismatch text) IS 'Enqueue one job inside the caller''s transaction; returns its id (or, within the idempotency window, the id of the job first submitted with the same key). A producer role''s job is its own (producer_id defaults to it; another is refused).';

CREATE FUNCTION jobqueue.enqueue_many(jobs jsonb) RETURNS TABLE(id uuid, created boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    held text := jobqueue.session_producer();
    other text;
BEGIN
    IF held IS NOT NULL AND jsonb_typeof(jobs) = 'array' THEN
        SELECT e.job->>'producer_id' INTO other FROM jsonb_array_elements(jobs) AS e(job)
        WHERE jsonb_typeof(e.job) = 'object' AND e.job->>'producer_id' <> held LIMIT 1;
        PERFORM jobqueue.acting_producer(other);
        jobs := coalesce((SELECT jsonb_agg(CASE WHEN jsonb_typeof(e.job) = 'object'
                                                THEN e.job || jsonb_build_object('producer_id', held)
                                                ELSE e.job END ORDER BY e.ord)
                          FROM jsonb_array_elements(jobs) WITH ORDINALITY AS e(job, ord)), '[]'::jsonb);
    END IF;
    RETURN QUERY SELECT r.id, r.created FROM jobqueue.enqueue_many_unchecked(jobs) AS r;
END $$;
COMMENT ON FUNCTION jobqueue.enqueue_many(jobs jsonb) IS 'Enqueue a JSON array of jobs in one statement: all or nothing; a producer role''s jobs are its own.';

CREATE OR REPLACE FUNCTION jobqueue.cancel(job_id uuid) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    held text := jobqueue.session_producer();
    current_state text;
BEGIN
    -- Another producer's job does not exist for a producer role.
    SELECT j.state INTO current_state FROM jobqueue.jobs j
     WHERE j.id = job_id AND (held IS NULL OR j.producer_id = held) FOR UPDATE;
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

-- Event streams: registering a listener turns job events on; producers (a Python client's wait())
-- do it through these instead of writing the table.
CREATE FUNCTION jobqueue.register_event_listener(listener_id text, ttl double precision) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
    DELETE FROM jobqueue.event_listeners WHERE expires_at < now() - interval '1 hour';
    INSERT INTO jobqueue.event_listeners AS l (listener_id, expires_at)
    VALUES (register_event_listener.listener_id, now() + make_interval(secs => register_event_listener.ttl))
    ON CONFLICT (listener_id) DO UPDATE SET expires_at = excluded.expires_at;
$$;
CREATE FUNCTION jobqueue.unregister_event_listener(listener_id text) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
    DELETE FROM jobqueue.event_listeners l WHERE l.listener_id = unregister_event_listener.listener_id;
$$;

-- Granting and creating login roles (`jobqueue roles`): invoker's rights, so the caller needs
-- CREATEROLE (or ADMIN OPTION on the group) as for a hand-written GRANT; identifiers are quoted.
CREATE FUNCTION jobqueue.grant_role(kind text, login text, producer text DEFAULT NULL) RETURNS text
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
BEGIN
    IF kind IS NULL OR kind NOT IN ('producer', 'worker', 'admin', 'api', 'readonly') THEN
        PERFORM jobqueue.invalid('role', 'must be one of producer, worker, admin, api, readonly');
    END IF;
    IF login IS NULL OR NOT EXISTS (SELECT FROM pg_roles WHERE rolname = login) THEN
        PERFORM jobqueue.invalid('login_role', format('no role named %s: create it first (jobqueue roles login)', login));
    END IF;
    IF producer IS NOT NULL AND (kind <> 'producer' OR length(producer) NOT BETWEEN 1 AND 200) THEN
        PERFORM jobqueue.invalid('producer', 'only with role producer, 1 to 200 characters');
    END IF;
    EXECUTE format('GRANT %I TO %I', 'jobqueue_' || kind, login);
    IF producer IS NOT NULL THEN
        INSERT INTO jobqueue.producer_roles AS r (role_name, producer_id) VALUES (login, producer)
        ON CONFLICT (role_name) DO UPDATE SET producer_id = excluded.producer_id;
    END IF;
    RETURN 'jobqueue_' || kind;
END $$;

CREATE FUNCTION jobqueue.revoke_role(kind text, login text) RETURNS text
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
BEGIN
    IF kind IS NULL OR kind NOT IN ('producer', 'worker', 'admin', 'api', 'readonly') THEN
        PERFORM jobqueue.invalid('role', 'must be one of producer, worker, admin, api, readonly');
    END IF;
    IF login IS NULL OR NOT EXISTS (SELECT FROM pg_roles WHERE rolname = login) THEN
        PERFORM jobqueue.invalid('login_role', format('no role named %s', login));
    END IF;
    EXECUTE format('REVOKE %I FROM %I', 'jobqueue_' || kind, login);
    IF kind = 'producer' THEN
        DELETE FROM jobqueue.producer_roles WHERE role_name = login;
    END IF;
    RETURN 'jobqueue_' || kind;
END $$;

CREATE FUNCTION jobqueue.create_login(login text, password text DEFAULT NULL) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $$
BEGIN
    IF login IS NULL OR length(login) NOT BETWEEN 1 AND 63 THEN
        PERFORM jobqueue.invalid('login_role', 'must be a role name of 1 to 63 characters');
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = login AND (rolsuper OR NOT rolcanlogin)) THEN
        PERFORM jobqueue.invalid('login_role', format('%s exists and is a superuser or cannot log in: pick another name', login));
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = login) THEN
        IF password IS NOT NULL THEN
            EXECUTE format('ALTER ROLE %I PASSWORD %L', login, password);
        END IF;
        RETURN false;
    END IF;
    IF password IS NULL THEN
        EXECUTE format('CREATE ROLE %I LOGIN', login);
    ELSE
        EXECUTE format('CREATE ROLE %I LOGIN PASSWORD %L', login, password);
    END IF;
    RETURN true;
END $$;

REVOKE EXECUTE ON FUNCTION jobqueue.grant_role(text, text, text), jobqueue.revoke_role(text, text),
    jobqueue.create_login(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobqueue.grant_role(text, text, text), jobqueue.revoke_role(text, text),
    jobqueue.create_login(text, text) TO jobqueue_admin;

-- Entry points running as the owner: only jobqueue's roles may call them.
REVOKE EXECUTE ON FUNCTION
    jobqueue.session_producer(), jobqueue.enqueue(text, jsonb, text, timestamptz, text, integer, text, interval, text,
    text, interval, timestamptz, interval, interval, text), jobqueue.enqueue_many(jsonb), jobqueue.cancel(uuid),
    jobqueue.register_event_listener(text, double precision), jobqueue.unregister_event_listener(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    jobqueue.session_producer(), jobqueue.enqueue(text, jsonb, text, timestamptz, text, integer, text, interval, text,
    text, interval, timestamptz, interval, interval, text), jobqueue.enqueue_many(jsonb), jobqueue.cancel(uuid),
    jobqueue.register_event_listener(text, double precision), jobqueue.unregister_event_listener(text)
    TO jobqueue_producer, jobqueue_worker, jobqueue_admin, jobqueue_api;

GRANT USAGE ON SCHEMA jobqueue TO jobqueue_producer, jobqueue_worker, jobqueue_admin, jobqueue_api, jobqueue_readonly;
-- Every process checks the schema's revision at start.
GRANT SELECT ON public.jobqueue_alembic_version
    TO jobqueue_producer, jobqueue_worker, jobqueue_admin, jobqueue_api, jobqueue_readonly;

-- Producers: their rows of these three (row-level security below), and which fields to encrypt.
GRANT SELECT ON jobqueue.jobs, jobqueue.job_results, jobqueue.job_errors TO jobqueue_producer;
GRANT SELECT (job_type, encrypted_fields) ON jobqueue.task_defaults TO jobqueue_producer;

-- Workers: the queue tables they claim, ack, register, elect and maintain in; read-only settings;
-- never api_keys or producer_roles.
GRANT SELECT, INSERT, UPDATE, DELETE ON jobqueue.jobs, jobqueue.job_results, jobqueue.job_errors,
    jobqueue.idempotency_keys, jobqueue.workers, jobqueue.worker_stats, jobqueue.leaders, jobqueue.schedules,
    jobqueue.schedule_fires, jobqueue.throughput_history, jobqueue.circuits, jobqueue.circuit_job_types,
    jobqueue.task_defaults, jobqueue.event_listeners TO jobqueue_worker;
GRANT SELECT ON jobqueue.queue_settings, jobqueue.queue_retention, jobqueue.dead_letters, jobqueue.queue_stats
    TO jobqueue_worker;

-- Admins: every row of every table (no DDL: no ownership, no TRUNCATE).
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA jobqueue TO jobqueue_admin;
-- The API: as admins (its admin endpoints), but API keys and producer mappings are read-only / not its business.
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA jobqueue TO jobqueue_api;
REVOKE INSERT, UPDATE, DELETE ON jobqueue.api_keys FROM jobqueue_api;
REVOKE ALL ON jobqueue.producer_roles FROM jobqueue_api;
-- Readers: every table and view but the API keys.
GRANT SELECT ON ALL TABLES IN SCHEMA jobqueue TO jobqueue_readonly;
REVOKE SELECT ON jobqueue.api_keys FROM jobqueue_readonly;

GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA jobqueue TO jobqueue_worker, jobqueue_admin, jobqueue_api;

-- The leader's VACUUM and REINDEX CONCURRENTLY need the owner before PostgreSQL 17; from 17 on the
-- MAINTAIN privilege is enough (before it, the worker's vacuumer and reindexer stand aside and
-- autovacuum does the vacuuming; see docs/security.md).
DO $$
BEGIN
    IF current_setting('server_version_num')::integer >= 170000 THEN
        EXECUTE 'GRANT MAINTAIN ON jobqueue.jobs TO jobqueue_worker';
    END IF;
END $$;

-- Row-level security: producers see their own jobs, results and errors; everyone else with a
-- grant sees every row.
ALTER TABLE jobqueue.jobs ENABLE ROW LEVEL SECURITY;
ALTER TABLE jobqueue.job_results ENABLE ROW LEVEL SECURITY;
ALTER TABLE jobqueue.job_errors ENABLE ROW LEVEL SECURITY;

CREATE POLICY jobs_every_row ON jobqueue.jobs
    TO jobqueue_worker, jobqueue_admin, jobqueue_api, jobqueue_readonly USING (true) WITH CHECK (true);
CREATE POLICY jobs_own_rows ON jobqueue.jobs FOR SELECT
    TO jobqueue_producer USING (producer_id = (SELECT jobqueue.session_producer()));
CREATE POLICY job_results_every_row ON jobqueue.job_results
    TO jobqueue_worker, jobqueue_admin, jobqueue_api, jobqueue_readonly USING (true) WITH CHECK (true);
CREATE POLICY job_results_own_rows ON jobqueue.job_results FOR SELECT
    TO jobqueue_producer USING (EXISTS (SELECT FROM jobqueue.jobs j WHERE j.id = job_id));
CREATE POLICY job_errors_every_row ON jobqueue.job_errors
    TO jobqueue_worker, jobqueue_admin, jobqueue_api, jobqueue_readonly USING (true) WITH CHECK (true);
CREATE POLICY job_errors_own_rows ON jobqueue.job_errors FOR SELECT
    TO jobqueue_producer USING (EXISTS (SELECT FROM jobqueue.jobs j WHERE j.id = job_id));
