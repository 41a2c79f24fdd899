-- REST API (API keys, queue pause state): DDL of revision 0003_api.
--
-- * api_keys: keys are long random tokens, stored only as their SHA-256; each maps to a producer
--   id and a role. Revoking keeps the row (revoked_at) so `apikey list` shows the history.
-- * queue_settings: per queue, a paused flag (workers stop claiming from it; it keeps accepting
--   jobs) and optional backpressure limits overriding the API's defaults. Any change NOTIFYs
--   jobqueue_control, so workers re-read it at once, also after an UPDATE typed in psql.
-- * Job events for the SSE stream: statement-level triggers send job transitions on
--   jobqueue_events, one NOTIFY per statement (not per row; chunked only past ~7.8 KB), with the
--   ids as 22-character base64 — only while an API process with open streams is registered in
--   event_listeners.
-- * jobs_list_idx: the REST listing pages newest first by seq (keyset pagination).

CREATE TABLE jobqueue.api_keys (
    id           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    key_hash     bytea       NOT NULL UNIQUE,
    key_prefix   text        NOT NULL,
    producer_id  text        NOT NULL,
    role         text        NOT NULL DEFAULT 'producer',
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz,
    CONSTRAINT api_keys_role_known CHECK (role IN ('producer', 'admin')),
    CONSTRAINT api_keys_producer_present CHECK (length(producer_id) BETWEEN 1 AND 200),
    CONSTRAINT api_keys_hash_sha256 CHECK (length(key_hash) = 32)
);
COMMENT ON TABLE jobqueue.api_keys IS 'REST API keys: SHA-256 of the key, the producer id it acts as, its role (producer|admin).';

CREATE TABLE jobqueue.queue_settings (
    queue       text        PRIMARY KEY,
    paused      boolean     NOT NULL DEFAULT false,
    soft_limit  integer,
    hard_limit  integer,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queue_settings_limits_positive CHECK (soft_limit > 0 AND hard_limit > 0),
    CONSTRAINT queue_settings_limits_ordered CHECK (soft_limit <= hard_limit)
);
COMMENT ON TABLE jobqueue.queue_settings IS 'Per queue: paused (workers do not claim from it) and backpressure limits (NULL: the API default).';

CREATE FUNCTION jobqueue.notify_queue_settings() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('jobqueue_control', 'queue_settings');
    RETURN NULL;
END $$;

CREATE TRIGGER queue_settings_notify AFTER INSERT OR UPDATE OR DELETE ON jobqueue.queue_settings
    FOR EACH STATEMENT EXECUTE FUNCTION jobqueue.notify_queue_settings();

CREATE INDEX jobs_list_idx ON jobqueue.jobs (seq);

-- API processes with open SSE streams register here (refreshed while they listen). With no live
-- row the event triggers stop after one probe of this tiny table: no payload, no NOTIFY, no
-- listener woken, so nobody pays for events that nobody reads.
CREATE TABLE jobqueue.event_listeners (
    listener_id  text        PRIMARY KEY,
    expires_at   timestamptz NOT NULL
);
COMMENT ON TABLE jobqueue.event_listeners IS 'API processes streaming job events; job events are sent only while one is registered and unexpired.';

CREATE FUNCTION jobqueue.job_events_wanted() RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM jobqueue.event_listeners WHERE expires_at > now())
$$;

-- Sends job transitions as events on jobqueue_events. Payload: a JSON array of pieces
-- [event, queue, producer_id, ids], ids being 22-character base64 UUIDs concatenated. A piece
-- holds at most 150 ids and names whose JSON exceeds 1000 bytes are sent as null, so a piece stays
-- under ~5.4 KB and a payload (pieces joined up to 7800 bytes) under PostgreSQL's 8000-byte limit.
CREATE FUNCTION jobqueue.emit_job_events(events text[], queues text[], producers text[], ids uuid[])
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    piece text;
    buffer text := '';
BEGIN
    FOR piece IN
        SELECT json_build_array(p.event, p.queue, p.producer, string_agg(p.code, '' ORDER BY p.n))::text
        FROM (
            SELECT t.event, t.n,
                   CASE WHEN octet_length(to_json(t.queue)::text) <= 1000 THEN t.queue END AS queue,
                   CASE WHEN octet_length(to_json(t.producer)::text) <= 1000 THEN t.producer END AS producer,
                   rtrim(encode(uuid_send(t.id), 'base64'), '=') AS code,
                   (row_number() OVER (PARTITION BY t.event, t.queue, t.producer ORDER BY t.n) - 1) / 150 AS part
            FROM unnest(events, queues, producers, ids) WITH ORDINALITY AS t(event, queue, producer, id, n)
        ) p
        GROUP BY p.event, p.queue, p.producer, p.part
    LOOP
        IF octet_length(buffer) + octet_length(piece) > 7800 THEN
            PERFORM pg_notify('jobqueue_events', '[' || buffer || ']');
            buffer := '';
        END IF;
        buffer := CASE WHEN buffer = '' THEN piece ELSE buffer || ',' || piece END;
    END LOOP;
    IF buffer <> '' THEN
        PERFORM pg_notify('jobqueue_events', '[' || buffer || ']');
    END IF;
END $$;

CREATE FUNCTION jobqueue.job_events_on_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
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

-- processing -> pending keeping the attempt count is the sweeper reclaiming an expired lease
-- (job.failed, as the SPEC's transition table says); a graceful release gives the attempt back
-- and an admin retry leaves dead_letter: both are job.queued.
CREATE FUNCTION jobqueue.job_events_on_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT jobqueue.job_events_wanted() THEN
        RETURN NULL;
    END IF;
    PERFORM jobqueue.emit_job_events(array_agg(e.event), array_agg(e.queue), array_agg(e.producer_id),
                                     array_agg(e.id))
    FROM (
        SELECT n.id, n.queue, n.producer_id,
               CASE n.state
                   WHEN 'processing' THEN 'job.started'
                   WHEN 'completed' THEN 'job.completed'
                   WHEN 'failed' THEN 'job.failed'
                   WHEN 'dead_letter' THEN 'job.dead_letter'
                   WHEN 'cancelled' THEN 'job.cancelled'
                   ELSE CASE WHEN o.state = 'processing' AND n.attempts >= o.attempts
                             THEN 'job.failed' ELSE 'job.queued' END
               END AS event
        FROM new_jobs n
        JOIN old_jobs o ON o.id = n.id
        WHERE n.state <> o.state
    ) e
    HAVING count(*) > 0;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_events_insert AFTER INSERT ON jobqueue.jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobqueue.job_events_on_insert();

CREATE TRIGGER jobs_events_update AFTER UPDATE ON jobqueue.jobs
    REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobqueue.job_events_on_update();
