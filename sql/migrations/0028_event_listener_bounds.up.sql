-- 0028_event_listener_bounds: a registration in jobqueue.event_listeners switches job events on
-- for every statement on jobqueue.jobs, and any producer login may call the function (a Python
-- client's wait() does). It took any TTL (31 years: events on for good; a negative one) and any
-- id (100,000 characters), as many as a login liked, and let one login refresh or remove
-- another's registration. Now: a TTL is more than 0 and at most two minutes (longer ones are
-- shortened: every listener refreshes its registration anyway), an id is 1 to 255 characters,
-- one login holds at most 64 registrations, and a registration belongs to the login that made it.
ALTER TABLE jobqueue.event_listeners ADD COLUMN registered_by text NOT NULL DEFAULT session_user;
COMMENT ON COLUMN jobqueue.event_listeners.registered_by IS 'The login that registered it: only it may refresh or remove it.';

CREATE OR REPLACE FUNCTION jobqueue.register_event_listener(listener_id text, ttl double precision) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    max_ttl constant double precision := 120;
    per_login constant integer := 64;
    holder text;
BEGIN
    IF listener_id IS NULL OR length(listener_id) NOT BETWEEN 1 AND 255 THEN
        PERFORM jobqueue.invalid('listener_id', format('must be 1 to 255 characters (got %s)',
                                                       coalesce(length(listener_id)::text, 'none')));
    END IF;
    IF ttl IS NULL OR ttl = 'NaN' OR ttl <= 0 THEN
        PERFORM jobqueue.invalid('ttl', format('must be a number of seconds more than 0 (got %s)', coalesce(ttl::text, 'none')));
    END IF;
    DELETE FROM jobqueue.event_listeners l WHERE l.expires_at < now();
    SELECT l.registered_by INTO holder FROM jobqueue.event_listeners l
     WHERE l.listener_id = register_event_listener.listener_id FOR UPDATE;
    IF FOUND AND holder <> session_user THEN
        PERFORM jobqueue.invalid('listener_id', 'is registered by another login');
    ELSIF NOT FOUND AND (SELECT count(*) FROM jobqueue.event_listeners l WHERE l.registered_by = session_user) >= per_login THEN
        PERFORM jobqueue.invalid('listener_id', format('login %s holds %s registrations already, the most one may',
                                                       session_user, per_login));
    END IF;
    INSERT INTO jobqueue.event_listeners AS l (listener_id, expires_at, registered_by)
    VALUES (register_event_listener.listener_id, now() + make_interval(secs => least(ttl, max_ttl)), session_user)
    ON CONFLICT ON CONSTRAINT event_listeners_pkey DO UPDATE SET expires_at = excluded.expires_at
        WHERE l.registered_by = excluded.registered_by;
END $$;

CREATE OR REPLACE FUNCTION jobqueue.unregister_event_listener(listener_id text) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
    DELETE FROM jobqueue.event_listeners l
     WHERE l.listener_id = unregister_event_listener.listener_id AND l.registered_by = session_user;
$$;
