-- 0032_audit_log undone: the audit log goes (with everything it recorded), and the functions that
-- recorded into it are as they were before it.
DROP VIEW jobqueue.audit_trail;
DROP FUNCTION jobqueue.prune_audit_log(interval, integer);
DROP FUNCTION jobqueue.audit_hash(jobqueue.audit_log);
DROP TABLE jobqueue.audit_log;
DROP TABLE jobqueue.audit_chain;
DROP FUNCTION jobqueue.audit_chain_entry();
DROP FUNCTION jobqueue.audit_log_append_only();

CREATE OR REPLACE FUNCTION jobqueue.cancel(job_id uuid) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
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

CREATE OR REPLACE FUNCTION jobqueue.grant_role(kind text, login text, producer text DEFAULT NULL::text) RETURNS text
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
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

CREATE OR REPLACE FUNCTION jobqueue.revoke_role(kind text, login text) RETURNS text
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
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

CREATE OR REPLACE FUNCTION jobqueue.create_login(login text, password text DEFAULT NULL::text) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
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

CREATE OR REPLACE FUNCTION jobqueue.set_login_timeouts(login text, statement_timeout interval, idle_timeout interval) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
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

DROP FUNCTION jobqueue.audit(text, text, jsonb);
