-- Circuit breakers (jobqueue.circuits) and the job types behind each (jobqueue.circuit_job_types).
-- Every transition is one conditional statement on the circuit's row: concurrent workers queue on
-- its row lock, and under READ COMMITTED a waiting statement re-checks its WHERE against the row as
-- the other one committed it, so a failure is never lost, a circuit opens once, and exactly one
-- worker wins a probe. The table's trigger NOTIFYs jobqueue_circuits on every change of state.
-- Every time comparison takes an optional %(now)s so tests can control the clock.

-- name: circuit_sync
-- At worker start: app %(app)s's breakers (their settings; a running circuit keeps its state) and
-- which of its job types belong to which. Each declaration is the declaring app's own:
-- * a breaker's settings are written when it is new, when this app declared it, or when the app
--   that did has no live worker (running or stopping, a heartbeat within three of its intervals)
--   — then this app takes it over; one declared differently by a live other app is left as that
--   app declared it, and returned (the worker logs it);
-- * memberships are rows per (job type, breaker, app): this app adds its own and removes those it
--   made and makes no more (%(all_types)s, its job types: a task moved out of a breaker leaves it);
--   another app's stay, so a same-named task of another app that declares no breaker takes
--   nothing out of this one's. A membership stored before 0027 (app '') becomes this app's when it
--   declares the same one.
WITH live_apps AS (
    SELECT DISTINCT w.app FROM jobqueue.workers w
    WHERE w.app IS NOT NULL AND w.app <> %(app)s AND w.status IN ('running', 'stopping')
      AND w.last_heartbeat >= now() - make_interval(secs => 3 * w.heartbeat_interval)
), wanted AS (
    SELECT * FROM unnest(%(names)s::text[], %(thresholds)s::integer[], %(windows)s::float8[], %(resets)s::float8[])
        AS d(name, threshold, window_seconds, reset_after_seconds)
), declared AS (
    INSERT INTO jobqueue.circuits AS c (name, threshold, window_seconds, reset_after_seconds, declared_by)
    SELECT d.name, d.threshold, d.window_seconds, d.reset_after_seconds, %(app)s FROM wanted d
    ON CONFLICT (name) DO UPDATE
    SET threshold = excluded.threshold, window_seconds = excluded.window_seconds,
        reset_after_seconds = excluded.reset_after_seconds, declared_by = excluded.declared_by, updated_at = now()
    WHERE (c.declared_by = excluded.declared_by OR c.declared_by NOT IN (SELECT app FROM live_apps))
      AND (c.threshold, c.window_seconds, c.reset_after_seconds, c.declared_by)
          IS DISTINCT FROM (excluded.threshold, excluded.window_seconds, excluded.reset_after_seconds,
                            excluded.declared_by)
    RETURNING c.name
), overruled AS (
    SELECT c.name, c.declared_by FROM jobqueue.circuits c JOIN wanted d ON d.name = c.name
    WHERE c.declared_by IN (SELECT app FROM live_apps)
      AND (c.threshold, c.window_seconds, c.reset_after_seconds)
          IS DISTINCT FROM (d.threshold, d.window_seconds, d.reset_after_seconds)
), memberships AS (
    SELECT * FROM unnest(%(job_types)s::text[], %(circuits)s::text[]) AS m(job_type, circuit)
), members AS (
    INSERT INTO jobqueue.circuit_job_types AS m (job_type, circuit, declared_by)
    SELECT m.job_type, m.circuit, %(app)s FROM memberships m
    ON CONFLICT (job_type, circuit, declared_by) DO NOTHING
    RETURNING m.job_type
), adopted AS (
    DELETE FROM jobqueue.circuit_job_types m USING memberships w
    WHERE m.declared_by = '' AND m.job_type = w.job_type AND m.circuit = w.circuit
    RETURNING m.job_type
), left_out AS (
    DELETE FROM jobqueue.circuit_job_types m
    WHERE m.declared_by = %(app)s AND m.job_type = ANY(%(all_types)s::text[])
      AND NOT EXISTS (SELECT FROM memberships w WHERE w.job_type = m.job_type AND w.circuit = m.circuit)
    RETURNING m.job_type
)
-- (Every data-modifying CTE above runs to completion whether this reads it or not.)
SELECT 'circuit' AS what, o.name, o.declared_by FROM overruled o ORDER BY o.name;

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
       array_agg(DISTINCT t.job_type ORDER BY t.job_type) AS job_types
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
RETURNING (SELECT array_agg(DISTINCT t.job_type ORDER BY t.job_type) FROM jobqueue.circuit_job_types t
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
-- closes it and clears its count and the hold, so it trips again on new failures. Recorded in the
-- audit log (circuit.open, circuit.close) with the state it was in.
WITH prior AS (
    SELECT c.name, c.state, c.failures FROM jobqueue.circuits c WHERE c.name = %(name)s
), forced AS (
    UPDATE jobqueue.circuits AS c
    SET state = CASE WHEN %(action)s = 'open' THEN 'open' ELSE 'closed' END,
        forced_by_admin = %(action)s = 'open',
        opened_at = CASE WHEN %(action)s = 'open' THEN now() END,
        failures = CASE WHEN %(action)s = 'open' THEN c.failures ELSE 0 END,
        window_started_at = CASE WHEN %(action)s = 'open' THEN c.window_started_at END,
        probe_job_id = NULL, updated_at = now()
    WHERE c.name = %(name)s AND %(action)s IN ('open', 'close')
    RETURNING c.name
)
SELECT f.name
FROM forced f LEFT JOIN prior b ON b.name = f.name
CROSS JOIN LATERAL jobqueue.audit('circuit.' || %(action)s, f.name, jsonb_build_object(
    'was', b.state, 'failures', b.failures)) AS recorded;

-- name: circuit_list
-- Every circuit with its settings, state and job types (`GET /circuits`, the CLI, /metrics).
SELECT c.name, c.state, c.failures, c.window_started_at, c.opened_at, c.forced_by_admin, c.threshold,
       c.window_seconds, c.reset_after_seconds, c.probe_job_id, c.updated_at,
       coalesce((SELECT array_agg(DISTINCT t.job_type ORDER BY t.job_type) FROM jobqueue.circuit_job_types t
                 WHERE t.circuit = c.name), '{}') AS job_types,
       c.declared_by
FROM jobqueue.circuits c
WHERE %(name)s::text IS NULL OR c.name = %(name)s::text
ORDER BY c.name;
