-- The fault campaign (`make faults`, tests/harness/faults): its recording app's table and the
-- read-outs it judges a scenario by. It runs on databases of its own (one per scenario), never on a production one.

-- name: faults_create_schema
CREATE SCHEMA IF NOT EXISTS jobqueue_faults;

-- name: faults_create_executions
-- One row per handler run, committed before the handler returns: a run counts even when its
-- worker dies right after. ``token`` is drawn once per run, so a write retried after a lost reply
-- stays one row; ``fails`` marks runs whose handler then fails on purpose (the poison jobs).
CREATE TABLE IF NOT EXISTS jobqueue_faults.executions (
    token uuid PRIMARY KEY,
    job_id uuid NOT NULL,
    attempt integer NOT NULL,
    pid integer NOT NULL,
    fails boolean NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- name: faults_create_executions_index
CREATE INDEX IF NOT EXISTS executions_job_idx ON jobqueue_faults.executions (job_id);

-- name: faults_record_execution
INSERT INTO jobqueue_faults.executions (token, job_id, attempt, pid, fails)
VALUES (%(token)s, %(job_id)s, %(attempt)s, %(pid)s, %(fails)s)
ON CONFLICT (token) DO NOTHING;

-- name: faults_held_by_pid
-- The jobs a worker process holds (its lease) at this moment: what a fault to it may run twice.
SELECT j.id FROM jobqueue.jobs j JOIN jobqueue.workers w ON w.id = j.locked_by
WHERE w.pid = %(pid)s AND j.state = 'processing';

-- name: faults_registered_pids
-- Which of these worker processes have registered (the fleet is up before any fault is injected).
SELECT pid FROM jobqueue.workers WHERE pid = ANY(%(pids)s);

-- name: faults_processing
SELECT id FROM jobqueue.jobs WHERE state = 'processing';

-- name: faults_progress
-- (jobs in an end state, jobs still live, jobs pending): a drain is over when nothing is live;
-- faults are injected while jobs are still pending, so they hit the drain and not its tail.
SELECT count(*) FILTER (WHERE state IN ('completed', 'dead_letter', 'cancelled')),
       count(*) FILTER (WHERE state IN ('pending', 'processing', 'failed')),
       count(*) FILTER (WHERE state = 'pending')
FROM jobqueue.jobs;

-- name: faults_job_outcomes
-- Every job of the scenario's database with what judging it needs: its end state, the attempt its
-- result says it came from, how often its handler ran (and how many runs failed on purpose), its
-- last error.
SELECT j.id, j.job_type, j.payload->>'k', j.state, j.attempts, j.max_attempts, j.finished_at,
       r.outcome, (r.result->>'attempt')::integer, coalesce(e.runs, 0), coalesce(e.failing, 0),
       (SELECT x.error_type FROM jobqueue.job_errors x WHERE x.job_id = j.id ORDER BY x.attempt DESC LIMIT 1)
FROM jobqueue.jobs j
LEFT JOIN jobqueue.job_results r ON r.job_id = j.id
LEFT JOIN (SELECT job_id, count(*) AS runs, count(*) FILTER (WHERE fails) AS failing
           FROM jobqueue_faults.executions GROUP BY job_id) e ON e.job_id = j.id;

-- name: faults_terminate_backends
-- pg_terminate_backend of every client session of this database but the caller's own.
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend';

-- name: faults_runs
-- When each handler run was recorded and by which worker process, in order: the workers' writes
-- over time, from which the HA test reads its jobs/s, each worker's share and the longest stretch
-- without a write across a failover.
SELECT at, pid FROM jobqueue_faults.executions ORDER BY at;
