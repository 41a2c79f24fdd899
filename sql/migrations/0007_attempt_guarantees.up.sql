-- Every attempt has a deadline, and every dead letter says why it died.
--
-- deadline_at: set by the claim (the job's own timeout, else its task's, else the worker's
-- processing TTL). The heartbeat never extends a lease past it (plus a short grace), so a handler
-- that hangs cannot hold its job forever: its worker fails the attempt as a timeout, or — when
-- the worker is gone or wedged — the lease runs out at the deadline and the sweeper does.
ALTER TABLE jobqueue.jobs ADD COLUMN deadline_at timestamptz;
COMMENT ON COLUMN jobqueue.jobs.deadline_at IS 'When the running attempt must be finished (set by the claim); the lease never outlives it by more than a short grace.';

-- dead_reason: why a dead_letter job died — attempts_exhausted (its last attempt failed, timed out
-- or lost its lease), permanent_error (the handler said retrying cannot help), expired (it waited
-- past its expires_at without being run). NULL for every other state.
ALTER TABLE jobqueue.jobs ADD COLUMN dead_reason text,
    ADD CONSTRAINT jobs_dead_reason_known
        CHECK (dead_reason IN ('attempts_exhausted', 'permanent_error', 'expired'));
COMMENT ON COLUMN jobqueue.jobs.dead_reason IS 'Why a dead_letter job died: attempts_exhausted, permanent_error or expired.';
UPDATE jobqueue.jobs SET dead_reason = 'attempts_exhausted' WHERE state = 'dead_letter';

-- Sync handlers that ran past their deadline keep their thread (Python cannot kill one): each
-- worker reports how many it has, and restarts itself before they would starve it.
ALTER TABLE jobqueue.workers ADD COLUMN stuck_handlers integer NOT NULL DEFAULT 0;
COMMENT ON COLUMN jobqueue.workers.stuck_handlers IS 'Handlers past their deadline that are still running (sync handlers keep their thread); the worker restarts itself when they would starve it.';

CREATE OR REPLACE VIEW jobqueue.dead_letters AS
SELECT j.id, j.queue, j.job_type, jobqueue.priority_name(j.priority) AS priority, j.attempts,
       j.max_attempts, j.finished_at AS died_at, j.created_at, j.producer_id, j.payload,
       e.error_type AS last_error_type, e.message AS last_error, e.traceback AS last_traceback,
       j.dead_reason
FROM jobqueue.jobs j
LEFT JOIN LATERAL (
    SELECT error_type, message, traceback FROM jobqueue.job_errors
    WHERE job_id = j.id ORDER BY attempt DESC LIMIT 1
) e ON true
WHERE j.state = 'dead_letter';
COMMENT ON VIEW jobqueue.dead_letters IS 'Dead-lettered jobs with their last error and why they died.';
