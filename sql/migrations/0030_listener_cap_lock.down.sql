-- 0030_listener_cap_lock undone: register_event_listener as 0028 wrote it.
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
