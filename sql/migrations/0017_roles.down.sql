-- Undoes 0017: the tables are writable by their grants alone again, without row-level security.
-- The group roles are cluster-wide: another database of the cluster may still use them, so one is
-- dropped only when no database refers to it any more (pg_shdepend holds every database's grants,
-- owners and policies that name a role) and no role is a member of it; else it stays, with its
-- grants in this database revoked. A migrating role that may not drop roles leaves them too.

DROP POLICY jobs_every_row ON jobqueue.jobs;
DROP POLICY jobs_own_rows ON jobqueue.jobs;
DROP POLICY job_results_every_row ON jobqueue.job_results;
DROP POLICY job_results_own_rows ON jobqueue.job_results;
DROP POLICY job_errors_every_row ON jobqueue.job_errors;
DROP POLICY job_errors_own_rows ON jobqueue.job_errors;
ALTER TABLE jobqueue.jobs DISABLE ROW LEVEL SECURITY;
ALTER TABLE jobqueue.job_results DISABLE ROW LEVEL SECURITY;
ALTER TABLE jobqueue.job_errors DISABLE ROW LEVEL SECURITY;

-- enqueue() as 0009 made it (SECURITY INVOKER, any producer id).
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

COMMENT ON FUNCTION jobqueue.enqueue(job_type text, payload jsonb, priority text, run_at timestamp with time zone, queue text, max_attempts integer, idempotency_key text, delay interval, producer_id text, traceparent text, timeout interval, expires_at timestamp with time zone, expire_after interval, idempotency_window interval, idempotency_mismatch text) IS 'Enqueue one job inside the caller''s transaction; returns its id (or, within the idempotency window, the id of the job first submitted with the same key).';
GRANT EXECUTE ON FUNCTION jobqueue.enqueue(text, jsonb, text, timestamptz, text, integer, text, interval, text, text,
                                           interval, timestamptz, interval, interval, text) TO PUBLIC;
DROP FUNCTION jobqueue.enqueue_unchecked(text, jsonb, text, timestamptz, text, integer, text, interval, text, text,
                                         interval, timestamptz, interval, interval, text);
DROP FUNCTION jobqueue.enqueue_many(jsonb);
ALTER FUNCTION jobqueue.enqueue_many_unchecked(jsonb) RENAME TO enqueue_many;
DROP FUNCTION jobqueue.acting_producer(text);
DROP FUNCTION jobqueue.register_event_listener(text, double precision);
DROP FUNCTION jobqueue.unregister_event_listener(text);
DROP FUNCTION jobqueue.grant_role(text, text, text);
DROP FUNCTION jobqueue.revoke_role(text, text);
DROP FUNCTION jobqueue.create_login(text, text);

-- cancel() as 0001 made it (SECURITY INVOKER, any job).
DROP FUNCTION jobqueue.cancel(uuid);
CREATE FUNCTION jobqueue.cancel(job_id uuid) RETURNS text
    LANGUAGE plpgsql
    AS $$
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


DROP FUNCTION jobqueue.session_producer();
DROP TABLE jobqueue.producer_roles;

DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT oid, rolname FROM pg_roles
             WHERE rolname IN ('jobqueue_producer', 'jobqueue_worker', 'jobqueue_admin', 'jobqueue_api',
                               'jobqueue_readonly') LOOP
        EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA jobqueue FROM %I', r.rolname);
        EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA jobqueue FROM %I', r.rolname);
        EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobqueue FROM %I', r.rolname);
        EXECUTE format('REVOKE ALL ON SCHEMA jobqueue FROM %I', r.rolname);
        EXECUTE format('REVOKE ALL ON public.jobqueue_alembic_version FROM %I', r.rolname);
        IF NOT EXISTS (SELECT FROM pg_shdepend d WHERE d.refclassid = 'pg_authid'::regclass AND d.refobjid = r.oid)
           AND NOT EXISTS (SELECT FROM pg_auth_members m WHERE m.roleid = r.oid) THEN
            BEGIN
                EXECUTE format('DROP ROLE %I', r.rolname);
            EXCEPTION WHEN insufficient_privilege OR dependent_objects_still_exist THEN
                RAISE NOTICE 'jobqueue: role % kept (%)', r.rolname, SQLERRM;
            END;
        END IF;
    END LOOP;
END $$;
