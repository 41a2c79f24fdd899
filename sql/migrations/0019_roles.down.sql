-- Undoes 0019: the tables are writable by their grants alone again, without row-level security.
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

-- enqueue() as it was before 0019 (SECURITY INVOKER, any producer id): enqueue_unchecked()'s body,
-- restated under the old name; CREATE OR REPLACE leaves neither SECURITY DEFINER nor the pinned
-- search_path of the wrapper it replaces.
DO $$
DECLARE
    kept constant regprocedure := 'jobqueue.enqueue_unchecked(text, jsonb, text, timestamptz, text, integer, text, interval, text, text, interval, timestamptz, interval, interval, text)';
    definition text := pg_get_functiondef(kept);
BEGIN
    definition := replace(definition, 'FUNCTION jobqueue.enqueue_unchecked(', 'FUNCTION jobqueue.enqueue(');
    definition := regexp_replace(definition, '\menqueue_unchecked\.', 'enqueue.', 'g');
    EXECUTE definition;
    EXECUTE format('COMMENT ON FUNCTION jobqueue.enqueue(text, jsonb, text, timestamptz, text, integer, text, interval, text, text, interval, timestamptz, interval, interval, text) IS %L',
                   obj_description(kept, 'pg_proc'));
END $$;
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
