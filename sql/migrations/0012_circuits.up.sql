-- Circuit breakers (issue 12): when a dependency fails, every worker on every host stops claiming
-- the job types that call it, for a while, instead of burning their attempts against it.
--
-- * circuits: one row per breaker, declared in code (`queue.circuit(...)`) and written by workers
--   when they start (the settings; the state is never reset by a start). state is closed (jobs
--   run; failures are counted in a fixed window that starts with the first one), open (nobody
--   claims its job types; after reset_after_seconds one probe may start) or half_open (one probe
--   job runs: success closes, a counted failure opens again). forced_by_admin: opened by an
--   operator, it stays open (no probe) until an operator closes it.
-- * circuit_job_types: which breaker each job type belongs to (at most one), synced by workers.
-- * A change of state or of the forced flag NOTIFYs jobqueue_circuits (payload: the circuit), as
--   does any change of the job types: workers re-read the types they must not claim at once.
CREATE TABLE jobqueue.circuits (
    name                text             PRIMARY KEY,
    state               text             NOT NULL DEFAULT 'closed',
    failures            integer          NOT NULL DEFAULT 0,
    window_started_at   timestamptz,
    opened_at           timestamptz,
    probe_job_id        uuid,
    forced_by_admin     boolean          NOT NULL DEFAULT false,
    threshold           integer          NOT NULL,
    window_seconds      double precision NOT NULL,
    reset_after_seconds double precision NOT NULL,
    updated_at          timestamptz      NOT NULL DEFAULT now(),
    CONSTRAINT circuits_name_not_blank CHECK (btrim(name) <> ''),
    CONSTRAINT circuits_state_known CHECK (state IN ('closed', 'open', 'half_open')),
    CONSTRAINT circuits_threshold_positive CHECK (threshold >= 1),
    CONSTRAINT circuits_window_positive CHECK (window_seconds > 0),
    CONSTRAINT circuits_reset_positive CHECK (reset_after_seconds > 0),
    CONSTRAINT circuits_open_has_opened_at CHECK (state = 'closed' OR opened_at IS NOT NULL)
);
COMMENT ON TABLE jobqueue.circuits IS 'Circuit breakers shared by all workers: while open, no worker claims the job types of jobqueue.circuit_job_types that belong to it.';
COMMENT ON COLUMN jobqueue.circuits.failures IS 'Counted failures in the window that began at window_started_at (closed state).';
COMMENT ON COLUMN jobqueue.circuits.probe_job_id IS 'half_open: the one job let through to probe the dependency.';
COMMENT ON COLUMN jobqueue.circuits.forced_by_admin IS 'Opened by an operator: stays open, without probes, until an operator closes it.';

CREATE TABLE jobqueue.circuit_job_types (
    job_type   text        PRIMARY KEY,
    circuit    text        NOT NULL REFERENCES jobqueue.circuits (name) ON DELETE CASCADE,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX circuit_job_types_circuit_idx ON jobqueue.circuit_job_types (circuit);
COMMENT ON TABLE jobqueue.circuit_job_types IS 'The circuit breaker each job type belongs to (@queue.task(circuit=...)), synced at worker start.';

CREATE FUNCTION jobqueue.notify_circuits() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('jobqueue_circuits', coalesce(NEW.name, OLD.name));
    RETURN NULL;
END $$;

CREATE TRIGGER circuits_notify AFTER UPDATE ON jobqueue.circuits
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.forced_by_admin IS DISTINCT FROM NEW.forced_by_admin)
    EXECUTE FUNCTION jobqueue.notify_circuits();
CREATE TRIGGER circuits_notify_delete AFTER DELETE ON jobqueue.circuits
    FOR EACH ROW EXECUTE FUNCTION jobqueue.notify_circuits();

CREATE FUNCTION jobqueue.notify_circuit_job_types() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('jobqueue_circuits', '');
    RETURN NULL;
END $$;

CREATE TRIGGER circuit_job_types_notify AFTER INSERT OR UPDATE OR DELETE ON jobqueue.circuit_job_types
    FOR EACH STATEMENT EXECUTE FUNCTION jobqueue.notify_circuit_job_types();
