DROP VIEW jobqueue.dead_letters;
CREATE VIEW jobqueue.dead_letters AS
SELECT j.id, j.queue, j.job_type, jobqueue.priority_name(j.priority) AS priority, j.attempts,
       j.max_attempts, j.finished_at AS died_at, j.created_at, j.producer_id, j.payload,
       e.error_type AS last_error_type, e.message AS last_error, e.traceback AS last_traceback
FROM jobqueue.jobs j
LEFT JOIN LATERAL (
    SELECT error_type, message, traceback FROM jobqueue.job_errors
    WHERE job_id = j.id ORDER BY attempt DESC LIMIT 1
) e ON true
WHERE j.state = 'dead_letter';
COMMENT ON VIEW jobqueue.dead_letters IS 'Dead-lettered jobs with their last error.';
ALTER TABLE jobqueue.workers DROP COLUMN stuck_handlers;
ALTER TABLE jobqueue.jobs DROP COLUMN dead_reason, DROP COLUMN deadline_at;
