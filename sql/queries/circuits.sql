-- Circuit breakers (jobqueue.circuits) and the job types behind each (jobqueue.circuit_job_types).
-- Every transition is one conditional statement on the circuit's row: concurrent workers queue on
-- its row lock, and under READ COMMITTED a waiting statement re-checks its WHERE against the row as
-- the other one committed it, so a failure is never lost, a circuit opens once, and exactly one
-- worker wins a probe. The table's trigger NOTIFYs jobqueue_circuits on every change of state.
-- Every time comparison takes an optional %(now)s so tests can control the clock.

-- name: circuit_sync
-- At worker start: the app's breakers (their settings; a running circuit keeps its state) and
-- which of its job types belong to which; %(without)s are its job types that belong to none (a
-- task moved out of its breaker leaves it).
WITH declared AS (
    INSERT INTO jobqueue.circuits AS c (name, threshold, window_seconds, reset_after_seconds)
    SELECT * FROM unnest(%(names)s::text[], %(thresholds)s::integer[], %(windows)s::float8[], %(resets)s::float8[])
    ON CONFLICT (name) DO UPDATE
    SET threshold = excluded.threshold, window_seconds = excluded.window_seconds,
        reset_after_seconds = excluded.reset_after_seconds, updated_at = now()
    WHERE (c.threshold, c.window_seconds, c.reset_after_seconds)
          IS DISTINCT FROM (excluded.threshold, excluded.window_seconds, excluded.reset_after_seconds)
    RETURNING c.name
), members AS (
    INSERT INTO jobqueue.circuit_job_types AS m (job_type, circuit)
    SELECT * FROM unnest(%(job_types)s::text[], %(circuits)s::text[])
    ON CONFLICT (job_type) DO UPDATE SET circuit = excluded.circuit, updated_at = now()
    WHERE m.circuit <> excluded.circuit
    RETURNING m.job_type
), left_out AS (
    DELETE FROM jobqueue.circuit_job_types m WHERE m.job_type = ANY(%(without)s::text[])
    RETURNING m.job_type
)
SELECT (SELECT count(*) FROM declared) AS declared, (SELECT count(*) FROM members) AS members,
       (SELECT count(*) FROM left_out) AS left_out;

-- name: circuit_blocking
-- The worker's view: every circuit not closed, with its job types (no worker claims them) and, when
-- a probe may start, in how many seconds: an open circuit once reset_after has passed since it
-- opened; a half-open one whose probe job is no longer running (its worker died or stopped and the
-- job went back to the queue), at once. Never for one an operator opened.
SELECT c.name, c.state, c.forced_by_admin, c.probe_job_id,
       CASE WHEN c.forced_by_admin THEN NULL
            WHEN c.state = 'open' THEN greatest(extract(epoch FROM
                c.opened_at + make_interval(secs => c.reset_after_seconds) - coalesce(%(now)s::timestamptz, now())), 0)::float8
            WHEN NOT EXISTS (SELECT 1 FROM jobqueue.jobs j WHERE j.id = c.probe_job_id AND j.state = 'processing')
            THEN 0::float8
       END AS probe_in,
       array_agg(t.job_type ORDER BY t.job_type) AS job_types
FROM jobqueue.circuits c
JOIN jobqueue.circuit_job_types t ON t.circuit = c.name
WHERE c.state <> 'closed'
GROUP BY c.name;

-- name: circuit_record_failure
-- A counted failure (an exception the breaker's trip_on lists) of one of the circuit's jobs while
-- it is closed: counted in the current window, or as the first of a new one when the window has
-- passed; at threshold the circuit opens. A failure while it is open or half-open changes nothing
-- (a job claimed before it opened fails as usual; a probe reports through circuit_probe_finished).
WITH counted AS (
    SELECT c.name,
           CASE WHEN c.window_started_at + make_interval(secs => c.window_seconds) > coalesce(%(now)s::timestamptz, now())
                THEN c.failures + 1 ELSE 1 END AS failures,
           CASE WHEN c.window_started_at + make_interval(secs => c.window_seconds) > coalesce(%(now)s::timestamptz, now())
                THEN c.window_started_at ELSE coalesce(%(now)s::timestamptz, now()) END AS window_started_at
    FROM jobqueue.circuits c
    WHERE c.name = %(name)s AND c.state = 'closed'
    FOR UPDATE
)
UPDATE jobqueue.circuits AS c
SET failures = k.failures, window_started_at = k.window_started_at,
    state = CASE WHEN k.failures >= c.threshold THEN 'open' ELSE 'closed' END,
    opened_at = CASE WHEN k.failures >= c.threshold THEN coalesce(%(now)s::timestamptz, now()) END,
    updated_at = now()
FROM counted k
WHERE c.name = k.name
RETURNING c.state, c.failures;

-- name: circuit_trip
-- A handler raised CircuitOpen: the circuit opens now, from closed, or from half-open (whichever job
-- said so: the dependency is down). Already open: nothing changes (its reset time is not pushed).
UPDATE jobqueue.circuits AS c
SET state = 'open', opened_at = coalesce(%(now)s::timestamptz, now()), probe_job_id = NULL, updated_at = now()
WHERE c.name = %(name)s AND c.state IN ('closed', 'half_open')
RETURNING c.state;

-- name: circuit_probe_begin
-- One worker, in the transaction that then claims the probe job, turns a circuit whose probe is due
-- (see circuit_blocking) half-open; the others' statements wait for its row lock and then find the
-- circuit half-open with a running probe, and change nothing. Returns the circuit's job types. If
-- the claim finds no job, the transaction rolls back: the circuit stays as it was.
-- A half-open circuit is taken over only if its probe is still %(stale_probe)s, the one the worker
-- saw not running: a waiting statement re-checks the circuit's row as the winner committed it, but
-- reads jobqueue.jobs in its own, older snapshot, where the winner's new probe is not running yet.
UPDATE jobqueue.circuits AS c
SET state = 'half_open', probe_job_id = NULL, updated_at = now()
WHERE c.name = %(name)s AND NOT c.forced_by_admin
  AND ((c.state = 'open'
        AND c.opened_at + make_interval(secs => c.reset_after_seconds) <= coalesce(%(now)s::timestamptz, now()))
       OR (c.state = 'half_open' AND c.probe_job_id = %(stale_probe)s::uuid
           AND NOT EXISTS (SELECT 1 FROM jobqueue.jobs j WHERE j.id = c.probe_job_id AND j.state = 'processing')))
RETURNING (SELECT array_agg(t.job_type ORDER BY t.job_type) FROM jobqueue.circuit_job_types t
           WHERE t.circuit = c.name) AS job_types;

-- name: circuit_probe_claimed
UPDATE jobqueue.circuits SET probe_job_id = %(job_id)s, updated_at = now()
WHERE name = %(name)s AND state = 'half_open';

-- name: circuit_probe_finished
-- The probe job's outcome, reported by its worker before its ack: 'success' closes the circuit
-- (its failure count starts afresh), 'failure' (a counted failure, or CircuitOpen) opens it again
-- for another reset_after, 'inconclusive' (a failure trip_on does not list, a cancel) reopens it
-- with its probe due at once. Only the circuit's current probe counts.
UPDATE jobqueue.circuits AS c
SET state = CASE WHEN %(outcome)s = 'success' THEN 'closed' ELSE 'open' END,
    opened_at = CASE %(outcome)s WHEN 'success' THEN NULL
                                 WHEN 'failure' THEN coalesce(%(now)s::timestamptz, now())
                                 ELSE c.opened_at END,
    failures = CASE WHEN %(outcome)s = 'success' THEN 0 ELSE c.failures END,
    window_started_at = CASE WHEN %(outcome)s = 'success' THEN NULL ELSE c.window_started_at END,
    probe_job_id = NULL, updated_at = now()
WHERE c.name = %(name)s AND c.state = 'half_open' AND c.probe_job_id = %(job_id)s
  AND %(outcome)s IN ('success', 'failure', 'inconclusive')
RETURNING c.state;

-- name: circuit_force
-- An operator's command: 'open' holds the circuit open (no probe) until one closes it; 'close'
-- closes it and clears its count and the hold, so it trips again on new failures.
UPDATE jobqueue.circuits AS c
SET state = CASE WHEN %(action)s = 'open' THEN 'open' ELSE 'closed' END,
    forced_by_admin = %(action)s = 'open',
    opened_at = CASE WHEN %(action)s = 'open' THEN now() END,
    failures = CASE WHEN %(action)s = 'open' THEN c.failures ELSE 0 END,
    window_started_at = CASE WHEN %(action)s = 'open' THEN c.window_started_at END,
    probe_job_id = NULL, updated_at = now()
WHERE c.name = %(name)s AND %(action)s IN ('open', 'close')
RETURNING c.name;

-- name: circuit_list
-- Every circuit with its settings, state and job types (`GET /circuits`, the CLI, /metrics).
SELECT c.name, c.state, c.failures, c.window_started_at, c.opened_at, c.forced_by_admin, c.threshold,
       c.window_seconds, c.reset_after_seconds, c.probe_job_id, c.updated_at,
       coalesce((SELECT array_agg(t.job_type ORDER BY t.job_type) FROM jobqueue.circuit_job_types t
                 WHERE t.circuit = c.name), '{}') AS job_types
FROM jobqueue.circuits c
WHERE %(name)s::text IS NULL OR c.name = %(name)s::text
ORDER BY c.name;
