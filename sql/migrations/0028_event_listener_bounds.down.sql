-- 0028_event_listener_bounds undone: the two functions as 0019 wrote them, no owner column.
CREATE OR REPLACE FUNCTION jobqueue.register_event_listener(listener_id text, ttl double precision) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
    DELETE FROM jobqueue.event_listeners WHERE expires_at < now() - interval '1 hour';
    INSERT INTO jobqueue.event_listeners AS l (listener_id, expires_at)
    VALUES (register_event_listener.listener_id, now() + make_interval(secs => register_event_listener.ttl))
    ON CONFLICT (listener_id) DO UPDATE SET expires_at = excluded.expires_at;
$$;
CREATE OR REPLACE FUNCTION jobqueue.unregister_event_listener(listener_id text) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
    DELETE FROM jobqueue.event_listeners l WHERE l.listener_id = unregister_event_listener.listener_id;
$$;

ALTER TABLE jobqueue.event_listeners DROP COLUMN registered_by;
