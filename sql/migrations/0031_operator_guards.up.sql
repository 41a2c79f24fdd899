-- 0031_operator_guards: what an operator's tools need to refuse or flag a mistake instead of
-- silently acting on it.
--
-- 1. API keys get a name (what it is for: "ci", "billing-prod") and an expiry. The API refuses a
--    key past its expires_at (401 naming the expiry) whatever its cache holds; NULL: never expires.
ALTER TABLE jobqueue.api_keys
    ADD COLUMN name text,
    ADD COLUMN expires_at timestamptz,
    ADD CONSTRAINT api_keys_name_length CHECK (name IS NULL OR length(name) BETWEEN 1 AND 100),
    ADD CONSTRAINT api_keys_expiry_after_creation CHECK (expires_at IS NULL OR expires_at > created_at);
COMMENT ON COLUMN jobqueue.api_keys.name IS 'What the key is for, as its creator named it (jobqueue apikey create --name); NULL: unnamed.';
COMMENT ON COLUMN jobqueue.api_keys.expires_at IS 'The API refuses the key from this time on (NULL: never expires).';

-- 2. Every queue and job type a worker has ever registered to serve, kept after the worker's own
--    registry row is forgotten (a day after it stopped): what "never served" means when an
--    enqueue names a queue or job type (a misspelling warns) and when a pause names a queue
--    (an unknown one is refused). Written by a trigger of the registry, so every registration
--    path records them; a worker start adds only the names not yet recorded.
CREATE TABLE jobqueue.served_names (
    kind text NOT NULL,
    name text NOT NULL,
    first_served_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, name),
    CONSTRAINT served_names_kind_known CHECK (kind IN ('queue', 'job_type'))
);
COMMENT ON TABLE jobqueue.served_names IS 'Every queue and job type a worker ever registered to serve (jobqueue.workers.queues, job_types), kept after the worker is forgotten: a name never recorded here (nor declared) is flagged as a likely misspelling.';

CREATE FUNCTION jobqueue.record_served_names() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO jobqueue.served_names (kind, name)
    SELECT 'queue', q FROM unnest(NEW.queues) AS q
    UNION
    SELECT 'job_type', t FROM unnest(NEW.job_types) AS t
    ON CONFLICT (kind, name) DO NOTHING;
    RETURN NULL;
END $$;

CREATE TRIGGER workers_record_served_names
    AFTER INSERT OR UPDATE OF queues, job_types ON jobqueue.workers
    FOR EACH ROW EXECUTE FUNCTION jobqueue.record_served_names();

INSERT INTO jobqueue.served_names (kind, name, first_served_at)
SELECT 'queue', q, min(w.started_at) FROM jobqueue.workers w, unnest(w.queues) AS q GROUP BY q
UNION ALL
SELECT 'job_type', t, min(w.started_at) FROM jobqueue.workers w, unnest(w.job_types) AS t GROUP BY t
ON CONFLICT (kind, name) DO NOTHING;

GRANT SELECT, INSERT ON jobqueue.served_names TO jobqueue_worker, jobqueue_admin, jobqueue_api;
GRANT SELECT ON jobqueue.served_names TO jobqueue_readonly;
